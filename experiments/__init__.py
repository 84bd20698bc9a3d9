"""Experiments: each folder holds a README (question, command, result table) and the scripts that produced it."""
