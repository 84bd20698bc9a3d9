"""Generated documents with open answers for D2L (`data=d2l_facts`): a made-up person, the company they founded and
their teacher, stated in one sentence per fact, with questions that need one fact or two.

    Dravel Kostirun was born on 14 March 1962. Dravel Kostirun was born in Port Zeamouth. Dravel Kostirun founded
    Brisvaen Foundry. Brisvaen Foundry was founded in 1994. Brisvaen Foundry is based in Tolbridge. ...

    When was Dravel Kostirun born?                               -> 14 March 1962        (one fact)
    Where is the company founded by Dravel Kostirun based?       -> Tolbridge            (two facts: a bridge)
    Who founded the company based in Tolbridge?                  -> Dravel Kostirun      (two facts)

Answers are open: dates, numbers, and names and places composed from syllables (hundreds of thousands of values
per slot), so a guess scores ~0 and the only way to answer is to read the document. Names and places are split
between training and held-out documents by a hash of the string (no held-out answer or entity is ever a training
one, and both splits come from the same distribution). Every answer is a span of its document (`answer_start`):
the records are an extractive short-answer set, written in SQuAD v1.1's JSON format by
`python -m posttrain.data.d2l.facts --out FILE` (read back by `data=d2l_squad data.source=jsonl data.path=FILE`).

Every question has a `kind` (its fact or bridge), so the "same LoRA, other entity" control can ask another
document's entity the same kind of question. `probes` are paraphrased questions, one per stated fact (the
per-document context-distillation baseline's probe questions when they must differ from the evaluated ones).

Long documents (`train_doc_tokens`, `eval_doc_tokens`, needs the tokenizer): the fact sentences scattered among
filler sentences up to a length in tokens (`posttrain.data.d2l.haystack`). A held-out document's entity, facts and
questions do not depend on its length: the same questions at every length.
"""

from __future__ import annotations

import argparse
import json
import random
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posttrain.data.d2l.haystack import scatter

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "tr", "st", "sh")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou", "io")
_CODAS = ("", "n", "r", "s", "l", "th", "nd", "rk")
_PLACE_SUFFIXES = ("ford", "ton", "mouth", "dale", "haven", "field", "burg", "wick", "stead", "more")
_PLACE_PREFIXES = ("Port", "Lake", "Mount", "Fort", "East", "West", "North", "New")
_ORG_SUFFIXES = ("Works", "Labs", "Institute", "Press", "Foundry", "Mills", "Studios", "Trust", "Dynamics", "Guild")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


@dataclass(frozen=True)
class Fact:
    """One stated fact: its sentence, the question it answers, a paraphrase of that question (probe), the field
    that is the answer."""

    kind: str
    sentence: str
    question: str
    probe: str
    answer: str


@dataclass(frozen=True)
class Bridge:
    """A question that needs two facts (`needs`); `states`: the fact whose sentence holds the answer."""

    kind: str
    question: str
    needs: tuple[str, str]
    answer: str
    states: str


FACTS: tuple[Fact, ...] = (
    Fact("birth_date", "{person} was born on {birth_date}.", "When was {person} born?",
         "On what date was {person} born?", "birth_date"),
    Fact("birthplace", "{person} was born in {birthplace}.", "Where was {person} born?",
         "In which town was {person} born?", "birthplace"),
    Fact("founded", "{person} founded {org}.", "Which company did {person} found?",
         "What is the name of the company that {person} founded?", "org"),
    Fact("org_year", "{org} was founded in {org_year}.", "In which year was {org} founded?",
         "When was {org} established?", "org_year"),
    Fact("org_city", "{org} is based in {org_city}.", "Where is {org} based?",
         "In which city is {org} located?", "org_city"),
    Fact("org_staff", "{org} employs {org_staff} people.", "How many people does {org} employ?",
         "How many employees does {org} have?", "org_staff"),
    Fact("mentor", "{person} studied under {mentor}.", "Who did {person} study under?",
         "Who was the teacher of {person}?", "mentor"),
    Fact("mentor_city", "{mentor} lives in {mentor_city}.", "Where does {mentor} live?",
         "In which city does {mentor} live?", "mentor_city"),
    Fact("papers", "{person} has published {papers} papers.", "How many papers has {person} published?",
         "What number of papers has {person} published?", "papers"),
)  # fmt: skip
BRIDGES: tuple[Bridge, ...] = (
    Bridge("org_city_of_founder", "Where is the company founded by {person} based?", ("founded", "org_city"),
           "org_city", "org_city"),
    Bridge("org_staff_of_founder", "How many people does the company founded by {person} employ?",
           ("founded", "org_staff"), "org_staff", "org_staff"),
    Bridge("org_year_of_founder", "In which year was the company that {person} founded established?",
           ("founded", "org_year"), "org_year", "org_year"),
    Bridge("city_of_teacher", "Where does the teacher of {person} live?", ("mentor", "mentor_city"),
           "mentor_city", "mentor_city"),
    Bridge("founder_of_org_in_city", "Who founded the company based in {org_city}?", ("org_city", "founded"),
           "person", "founded"),
)  # fmt: skip
FACT_KINDS = {f.kind: f for f in FACTS}
PARAMS = ("num_facts", "single_hop", "two_hop", "reply", "train_doc_tokens", "eval_doc_tokens", "train_skip")


def held_out_name(name: str) -> bool:
    """The split a composed name belongs to: a fixed hash partition (so both splits share one distribution)."""
    return zlib.crc32(name.lower().encode()) % 2 == 1


def _word(rng: random.Random, syllables: int) -> str:
    return ("".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)) + rng.choice(_CODAS)).title()


def _person(rng: random.Random) -> str:
    return f"{_word(rng, 2)} {_word(rng, rng.choice((2, 3)))}"


def _place(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return f"{rng.choice(_PLACE_PREFIXES)} {_word(rng, 2)}"
    return _word(rng, 2) + rng.choice(_PLACE_SUFFIXES)


def _org(rng: random.Random) -> str:
    return f"{_word(rng, rng.choice((2, 3)))} {rng.choice(_ORG_SUFFIXES)}"


def _in_split(rng: random.Random, make: Any, held_out: bool) -> str:
    while True:
        name = make(rng)
        if held_out_name(name) == held_out:
            return name


def draw_entity(rng: random.Random, held_out: bool) -> dict[str, str]:
    """The values of every fact field for one made-up person (names and places from `held_out`'s split)."""
    born = rng.randint(1850, 1985)
    staff = rng.randint(120, 98000)
    return {
        "person": _in_split(rng, _person, held_out),
        "birth_date": f"{rng.randint(1, 28)} {rng.choice(_MONTHS)} {born}",
        "birthplace": _in_split(rng, _place, held_out),
        "org": _in_split(rng, _org, held_out),
        "org_year": str(rng.randint(born + 20, born + 39)),
        "org_city": _in_split(rng, _place, held_out),
        "org_staff": f"{staff:,}",
        "mentor": _in_split(rng, _person, held_out),
        "mentor_city": _in_split(rng, _place, held_out),
        "papers": str(rng.randint(101, 999)),
    }


def _questions(
    rng: random.Random, values: dict[str, str], facts: list[Fact], single_hop: int, two_hop: int
) -> list[dict[str, Any]]:
    stated = {f.kind for f in facts}
    singles = rng.sample(facts, min(single_hop, len(facts)))
    bridges = [b for b in BRIDGES if set(b.needs) <= stated]
    bridges = rng.sample(bridges, min(two_hop, len(bridges)))
    out = [
        {"kind": f.kind, "hops": 1, "question": f.question.format(**values), "answer": values[f.answer],
         "states": f.kind, "evidence": [f.kind]}
        for f in singles
    ]  # fmt: skip
    out += [
        {"kind": b.kind, "hops": 2, "question": b.question.format(**values), "answer": values[b.answer],
         "states": b.states, "evidence": list(b.needs)}
        for b in bridges
    ]  # fmt: skip
    return out


def fact_documents(
    num_docs: int,
    seed: int = 0,
    held_out: bool = False,
    *,
    num_facts: int = len(FACTS),
    single_hop: int = 3,
    two_hop: int = 1,
    train_doc_tokens: int = 0,
    eval_doc_tokens: int = 0,
    train_skip: int = 0,
    tokenizer: Any = None,
) -> list[dict[str, Any]]:
    """`num_docs` documents `{entity, document, facts, qas, probes, sentences}`; each states `num_facts` facts (in
    FACTS order) and has `single_hop` one-fact and up to `two_hop` two-fact questions, each with its `answer`,
    `answer_start` (a span of the document), `evidence_end` (where its last needed sentence ends) and `reply`
    sentence. Held-out documents are padded with filler to `eval_doc_tokens` tokens, training documents to a length
    drawn uniformly up to `train_doc_tokens` (0: the facts alone). Training documents start at `train_skip` of the
    seed's stream: a run that continues a hypernet trained on the first `train_skip` reads documents it has not seen
    (the held-out documents do not move)."""
    problems = facts_problems(
        {"num_facts": num_facts, "single_hop": single_hop, "two_hop": two_hop,
         "train_doc_tokens": train_doc_tokens, "eval_doc_tokens": eval_doc_tokens, "train_skip": train_skip}
    )  # fmt: skip
    if problems:
        raise ValueError(problems[0])
    target = eval_doc_tokens if held_out else train_doc_tokens
    if target and tokenizer is None:
        raise ValueError("documents padded to a length in tokens need the tokenizer (d2l_records(cfg, tokenizer))")
    split = "heldout" if held_out else "train"
    rng = random.Random(f"d2l-facts-{seed}-{split}")
    skip = 0 if held_out else train_skip
    docs = []
    for i in range(skip + num_docs):
        values = draw_entity(rng, held_out)
        chosen = set(rng.sample(range(len(FACTS)), num_facts))
        facts = [f for i_, f in enumerate(FACTS) if i_ in chosen]
        qas = _questions(rng, values, facts, single_hop, two_hop)
        if i < skip:  # drawn only to advance the stream
            continue
        sentences = [f.sentence.format(**values) for f in facts]
        if target:  # its own stream: the entity and questions above do not depend on the length
            hay = random.Random(f"d2l-facts-{seed}-{split}-{i}-filler")
            length = target if held_out else hay.randint(0, target)
            document, starts = scatter(sentences, length, tokenizer, hay)
        else:
            document = " ".join(sentences)
            starts = [sum(len(s) + 1 for s in sentences[:j]) for j in range(len(sentences))]
        where = {f.kind: (start, s) for f, start, s in zip(facts, starts, sentences)}
        for qa in qas:
            start, sentence = where[qa["states"]]
            qa["answer_start"] = start + sentence.index(qa["answer"])
            qa["evidence_end"] = max(where[k][0] + len(where[k][1]) for k in qa.pop("evidence"))
            qa["reply"] = sentence
            del qa["states"]
        docs.append(
            {
                "entity": values["person"],
                "document": document,
                "facts": {f.kind: values[f.answer] for f in facts},
                "sentences": sentences,
                "qas": qas,
                "probes": [f.probe.format(**values) for f in facts],
            }
        )
    return docs


def fact_qa(
    num_docs: int, seed: int = 0, held_out: bool = False, reply: str = "answer", **params: Any
) -> list[dict[str, Any]]:
    """Flat QA records `{doc_id, document, question, answer, answers, kind, hops, answer_start, evidence_end,
    probes}` (+ `reply`, the sentence stating the answer, with `reply=sentence`)."""
    if reply not in ("answer", "sentence"):
        raise ValueError(f"reply={reply!r} must be 'answer' or 'sentence'")
    records = []
    for i, d in enumerate(fact_documents(num_docs, seed=seed, held_out=held_out, **params)):
        for qa in d["qas"]:
            rec = {
                "doc_id": i,
                "document": d["document"],
                **{k: qa[k] for k in ("question", "answer", "kind", "hops", "answer_start", "evidence_end")},
                "answers": [qa["answer"]],
                "probes": d["probes"],
            }
            if reply == "sentence":
                rec["reply"] = qa["reply"]
            records.append(rec)
    return records


def facts_problems(params: Any) -> list[str]:
    """What is wrong with `data.params` of `data=d2l_facts` (empty: nothing), each as `data.params.<key>...`."""
    unknown = sorted(set(params) - set(PARAMS))
    if unknown:
        return [f"data.params.{unknown[0]} is not a d2l_facts parameter (known: {', '.join(PARAMS)})"]
    p = {"num_facts": len(FACTS), "single_hop": 3, "two_hop": 1, "train_doc_tokens": 0, "eval_doc_tokens": 0,
         "train_skip": 0}  # fmt: skip
    p.update({k: v for k, v in dict(params).items() if k != "reply"})
    bad = [k for k, v in p.items() if not isinstance(v, int) or isinstance(v, bool)]
    if bad:
        return [f"data.params.{bad[0]}={p[bad[0]]!r} must be an integer"]
    out = []
    if not 1 <= p["num_facts"] <= len(FACTS):
        out.append(f"data.params.num_facts={p['num_facts']} must be in [1, {len(FACTS)}]")
    if not 0 <= p["single_hop"] <= p["num_facts"]:
        out.append(f"data.params.single_hop={p['single_hop']} must be in [0, num_facts={p['num_facts']}]")
    if not 0 <= p["two_hop"] <= len(BRIDGES):
        out.append(f"data.params.two_hop={p['two_hop']} must be in [0, {len(BRIDGES)}]")
    if p["single_hop"] + p["two_hop"] < 1:
        out.append("data.params.single_hop + two_hop must be at least 1 (no question to ask)")
    for key in ("train_doc_tokens", "eval_doc_tokens"):
        if p[key] < 0:
            out.append(f"data.params.{key}={p[key]} must be >= 0 (0: the facts alone)")
    if p["train_skip"] < 0:
        out.append(f"data.params.train_skip={p['train_skip']} must be >= 0 (documents of the stream to pass over)")
    if params.get("reply", "answer") not in ("answer", "sentence"):
        out.append(f"data.params.reply={params.get('reply')!r} must be answer or sentence")
    return out


def to_squad(docs: list[dict[str, Any]], prefix: str = "facts") -> dict[str, Any]:
    """SQuAD v1.1 JSON (`{version, data: [{title, paragraphs: [{context, qas}]}]}`) of `fact_documents` output."""
    return {
        "version": "1.1",
        "data": [
            {
                "title": d["entity"],
                "paragraphs": [
                    {
                        "context": d["document"],
                        "qas": [
                            {
                                "id": f"{prefix}-{i}-{j}",
                                "question": qa["question"],
                                "answers": [{"text": qa["answer"], "answer_start": qa["answer_start"]}],
                            }
                            for j, qa in enumerate(d["qas"])
                        ],
                    }
                ],
            }
            for i, d in enumerate(docs)
        ],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write generated fact documents as a SQuAD v1.1 JSON file.")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--docs", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--split", choices=("train", "heldout"), default="heldout")
    parser.add_argument("--single-hop", type=int, default=3)
    parser.add_argument("--two-hop", type=int, default=1)
    args = parser.parse_args(argv)
    docs = fact_documents(
        args.docs, args.seed, args.split == "heldout", single_hop=args.single_hop, two_hop=args.two_hop
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(to_squad(docs, f"facts-{args.split}-{args.seed}"), indent=1))
    print(f"{args.out}: {len(docs)} documents, {sum(len(d['qas']) for d in docs)} questions")


if __name__ == "__main__":
    main()
