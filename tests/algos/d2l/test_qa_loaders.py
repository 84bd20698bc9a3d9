"""The SQuAD, DROP and ROPES loaders with tiny local files in their hub columns: as a file (`data.source=jsonl`) and
through the hub code path (`datasets.load_dataset` of a local directory, `data.source=hub`, as on a machine with a
hub), from the data configs."""

from __future__ import annotations

import json

import pytest

from posttrain.data.d2l import d2l_records, load_squad
from posttrain.errors import DataError

ROWS = {
    "squad": lambda i: {
        "id": str(i),
        "title": "t",
        "context": f"Doc {i} is about Zorvath {i}.",
        "question": f"What is doc {i} about?",
        "answers": {"text": [f"Zorvath {i}", f"zorvath {i}"], "answer_start": [14 + len(str(i))] * 2},
    },
    "drop": lambda i: {
        "section_id": "s",
        "query_id": str(i),
        "passage": f"In game {i} the Bears scored {i + 3} points.",
        "question": f"How many points in game {i}?",
        "answers_spans": {"spans": [str(i + 3)], "types": ["number"]},
    },
    "ropes": lambda i: {
        "id": str(i),
        "background": f"Rule {i}: heat melts ice.",
        "situation": f"Town {i} is hot.",
        "question": f"Does ice melt in town {i}?",
        "answers": {"text": ["yes"]},
    },
}


def _write(path, fmt, indices):
    path.write_text("\n".join(json.dumps(ROWS[fmt](i)) for i in indices))


@pytest.mark.parametrize("fmt", ["squad", "drop", "ropes"])
def test_local_file_in_hub_columns(tmp_path, fmt):
    path = tmp_path / f"{fmt}.jsonl"
    _write(path, fmt, range(3))
    recs = load_squad(str(path), fmt=fmt)
    assert [r["doc_id"] for r in recs] == [0, 1, 2]
    first = recs[0]
    if fmt == "squad":
        assert first["answer"] == "Zorvath 0" and first["answers"] == ["Zorvath 0", "zorvath 0"]
        assert first["document"][first["answer_start"] :].startswith("Zorvath 0")
    elif fmt == "drop":
        assert first["document"] == "In game 0 the Bears scored 3 points." and first["answers"] == ["3"]
    else:  # ROPES: background, newline, situation (as the D2L paper's code builds the context)
        assert first["document"] == "Rule 0: heat melts ice.\nTown 0 is hot." and first["answer"] == "yes"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q"}))
    with pytest.raises(DataError, match="lacks"):
        load_squad(str(bad), fmt=fmt)


@pytest.mark.parametrize("name, fmt", [("d2l_squad", "squad"), ("d2l_drop", "drop"), ("d2l_ropes", "ropes")])
def test_hub_path_from_the_data_config(compose, tmp_path, name, fmt):
    """`datasets.load_dataset(path, split=...)` as on a hub machine, here of a local directory with split files."""
    hub = tmp_path / "hub"
    hub.mkdir()
    _write(hub / "train.jsonl", fmt, range(6))
    _write(hub / "validation.jsonl", fmt, range(100, 104))
    cfg = compose("algo=d2l", f"data={name}", f"data.path={hub}", "data.num_train=4", "data.num_eval=2")
    assert cfg.data.source == "hub" and cfg.data.params.eval_split == "validation"
    train, held = d2l_records(cfg.data)
    assert len({r["doc_id"] for r in train}) == 4 and len({r["doc_id"] for r in held}) == 2
    assert all("10" in r["question"] for r in held)  # held-out documents from the validation split
    assert not {r["document"] for r in train} & {r["document"] for r in held}


def test_unknown_hub_name_is_one_data_error(tmp_path):
    with pytest.raises(DataError, match="cannot load QA set"):
        load_squad(str(tmp_path / "nowhere"), fmt="drop")
    with pytest.raises(DataError, match="unknown QA format"):
        load_squad("x", fmt="narrativeqa")
