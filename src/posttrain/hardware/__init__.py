"""Hardware profiles, parameter counts and the memory plan (`mode=plan`), and the preflight before training."""

from posttrain.hardware.memory import plan
from posttrain.hardware.params import count_params
from posttrain.hardware.profile import apply_profile
from posttrain.hardware.report import plan_command, plan_summary, profile_plan

__all__ = ["apply_profile", "count_params", "plan", "plan_command", "plan_summary", "profile_plan"]
