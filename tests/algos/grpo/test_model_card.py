"""TRL's model card names the hub model a run started from, not "a fine-tuned version of None"."""

from __future__ import annotations

from tests.algos.grpo.helpers import make_trainer


def test_the_card_names_the_hub_model_and_a_model_without_one_gets_none(tmp_path):
    trainer = make_trainer(tmp_path)
    card = tmp_path / "card"
    trainer.args.output_dir = str(card)
    card.mkdir()
    trainer.base_model = None  # a random-init model: no card rather than a wrong one
    trainer.create_model_card(model_name="run")
    assert not (card / "README.md").exists()
    trainer.base_model = "HuggingFaceTB/SmolLM2-135M-Instruct"
    before = trainer.model.config._name_or_path
    trainer.create_model_card(model_name="run")
    text = (card / "README.md").read_text()
    assert "fine-tuned version of [HuggingFaceTB/SmolLM2-135M-Instruct]" in text and "version of [None]" not in text
    assert trainer.model.config._name_or_path == before  # the reference's load path is left as it was
