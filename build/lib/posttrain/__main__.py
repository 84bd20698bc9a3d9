"""`python -m posttrain ...` (= `train.py ...`, = the `posttrain-train` console script)."""

from posttrain.cli import main

main()
