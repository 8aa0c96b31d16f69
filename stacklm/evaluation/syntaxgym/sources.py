"""The 33 suites and the circuit map DuSell & Chiang (2022) scored, pinned by sha256, and the SG
score of a language model on all of them.

The files are the authors' copies of the SyntaxGym-format suites (``iclr2022`` tag of
bdusell/nondeterministic-stack-rnn, ``data/syntaxgym/`` and ``data/circuits.json``; see
``docs/design/cfl-and-ptb.md#sg-score``). A folder holding them is laid out as the reference copies:
``circuits.json`` and ``syntaxgym-format/<suite>.json``. A file whose sha256 differs is refused.
``download_suites`` (``stacklm ptb suites``, the rule ``ptb_suites``) fetches them from that
repository at the pinned commit into such a folder, each checked before it is written.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from stacklm.atomic import write_bytes_atomically
from stacklm.data.download import fetch_url
from stacklm.errors import StacklmError
from stacklm.evaluation.syntaxgym.circuits import Circuit, SGScores, circuits_from_dict, sg_scores
from stacklm.evaluation.syntaxgym.score import SuiteResult, TokenLogProbs, score_suite
from stacklm.evaluation.syntaxgym.suite import Suite, suite_from_dict

CIRCUITS_SHA256 = "51628b8cca1d3706146833f4c325f2df95b2aecb65ac7bd9c6ecfba56c877451"
SUITE_SHA256: dict[str, str] = {
    "center_embed": "692204017d3d8026a71fb400eb1dc6f3302c1a2067dd585126b7e50abee0e60b",
    "center_embed_mod": "1309e6b0647d1dca68eb03bf25b7529ea716e25fed46437bbe229cb58535f7f5",
    "cleft": "8790d5bd6f3dce0eb58c72019dec1ee5e4d02c56ec3ddd387a0784fda7bebf21",
    "cleft_modifier": "7c7ec3694c3a3a1aeba2a8024acf15d03fc9a81cfd3b1593d3bb9873f9e3ab06",
    "fgd-embed3": "5f18cff7fdbf4aec76a43be52180687a80ad394766573fd5c29cbc3c5ca91b95",
    "fgd-embed4": "1ad46ec2578a288fd8b727e73580a84efa77362061bb35d21bdcc66e3447a197",
    "fgd_hierarchy": "9fa596e38c43c1e4f9418de5d31d05be3edf3306280cb4960cb5b7678af082c3",
    "fgd_object": "38297d5e1ffdd974cb18973f76236a3c26f9479c6a8393e0a6e0c3af653e2d29",
    "fgd_pp": "ef72a3d687c02c13eeb10f4f732082df4f2e52e8c9b500c2fdfec9a418962076",
    "fgd_subject": "072be82e82a41a6972d4936c957c0eb76a575f5e646b262abb1de108630f1a7a",
    "mvrr": "3613d9d4e7fbbc4b0c6460a1830e76640a6e5116a99b74a45f942c799845b540",
    "mvrr_mod": "d73bda1aad5a00dc5a4f7bf7c163e1f88f99220bd84566822e3bb3528822b0cd",
    "npi_orc_any": "065edf6031b45af556d40edad51a848d1161e313a588d11fc6ee42ae5fb400df",
    "npi_orc_ever": "634875b49e3015ba141ef6eda0aef0073870080443d6f6f24287240899fe144b",
    "npi_src_any": "7ba5fbb1713974a4b25c69fbeecd561d1970e42d432a68d9aafbbfe9c416e0b3",
    "npi_src_ever": "27bb2dab25720dbfb58928f887569310235f925413664f04f1964d3b815e41ce",
    "npz_ambig": "77a2cd03641013bc0d0b342d20cb818aaf9fcc8e2f6e06f86ba3f6d42624cb87",
    "npz_ambig_mod": "43751c9fa14d3c2836bea77d57180adf4664b0d4023b2a2052d3118e90388542",
    "npz_obj": "8e2478376bca80097836e30258d6516eb77839e05e8932854963f21f64f15968",
    "npz_obj_mod": "1bd36c53145fff814ccade31b39334ec71e8cabb4cd6cb03cc42ad57142bb72a",
    "number_orc": "d482a1f01d7123732b59e076abc969d92c03aac53bf804271c724719e23bb794",
    "number_prep": "e0efa45cbf737ebdc2bc669f7d56ce8cb779ace714d5de806e2b134378b2eb40",
    "number_src": "ac3c2866bfadcfd59fc294475092fcbe155fdc610199b3897cd35e1bf67dcb47",
    "reflexive_orc_fem": "3c349faea09a317b62fa49f256f643c47e06a1f37835ccfd84765e49fea2f289",
    "reflexive_orc_masc": "6745eb628356c0655209f6ba7536c50e20f730573f6fdeae35ffa3be4c4221ca",
    "reflexive_prep_fem": "ea4dd6a3d217001fea003d6b6c5f088b93e45e4706d69f662fdd452a5244c611",
    "reflexive_prep_masc": "318517eccc2185cff21062fad9b4c6b2a5fc5f6f9a45f7bb30bf2a4df3539ac4",
    "reflexive_src_fem": "3c9313d17fcdb431b1c86a80b961bee38c378ea9ddafc9eb5adec46103cc7b44",
    "reflexive_src_masc": "c9478ded1f3c00e6470a8cd6af2bee3f9f5e257e4ebc5cb461dd1fa0e0d5730e",
    "subordination": "c85eb70a468abff4daf69ce54b3260e0dcebbe8f5e3afb6c7874b941052d4808",
    "subordination_orc-orc": "f57c896cdff1c3305c75d8d9a04f3b37f06429ecba00e297b312734d1a5bd94a",
    "subordination_pp-pp": "1922616b29a377d01157d89923f71c8766748659f4dd292e060ac61cb6236625",
    "subordination_src-src": "6779b8a60f1b913afd034547cb9c31168308970e06cac07bebd704f592bac0ce",
}


# bdusell/nondeterministic-stack-rnn at the tag iclr2022: data/circuits.json and data/syntaxgym/<suite>.json
SUITES_URL = "https://raw.githubusercontent.com/bdusell/nondeterministic-stack-rnn/7e27df658b1c36990d261f07470fdebcc499c7a8/data"
CIRCUITS_FILE = "circuits.json"
SUITE_FOLDER = "syntaxgym-format"
OFFLINE = "to work offline, set ptb.mirror to a folder holding sg-test-suites/circuits.json and sg-test-suites/syntaxgym-format/<suite>.json"


def download_suites(out: str | Path, suites: tuple[str, ...], url: str = SUITES_URL) -> None:
    """Fetch ``circuits.json`` and each of ``suites`` from the authors' repository at ``url`` into
    ``out`` (``out/circuits.json``, ``out/syntaxgym-format/<suite>.json``), each refused unless
    its sha256 is the pinned one; nothing is written unless every file matches."""
    unknown = [name for name in suites if name not in SUITE_SHA256]
    if unknown:
        raise StacklmError(f"no pinned suite {', '.join(map(repr, unknown))}; pinned: {', '.join(SUITE_SHA256)}")
    wanted = [(f"{url}/{CIRCUITS_FILE}", CIRCUITS_FILE, CIRCUITS_SHA256)]
    wanted += [(f"{url}/syntaxgym/{name}.json", f"{SUITE_FOLDER}/{name}.json", SUITE_SHA256[name]) for name in suites]
    fetched = []
    for source, target, sha256 in wanted:
        data = fetch_url(source, OFFLINE)
        if (digest := hashlib.sha256(data).hexdigest()) != sha256:
            raise StacklmError(f"{source}: sha256 {digest} does not match the pinned {sha256}")
        fetched.append((target, data))
    for target, data in fetched:
        write_bytes_atomically(Path(out) / target, data)


def _pinned_json(path: Path, sha256: str) -> object:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise StacklmError(f"{path}: file not found (expected the authors' copy, sha256 {sha256[:12]}…)") from None
    if (digest := hashlib.sha256(data).hexdigest()) != sha256:
        raise StacklmError(f"{path}: sha256 {digest} does not match the pinned {sha256}")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StacklmError(f"{path}: not UTF-8 JSON ({error})") from None


def read_pinned_circuits(directory: str | Path) -> tuple[Circuit, ...]:
    path = Path(directory) / CIRCUITS_FILE
    return circuits_from_dict(_pinned_json(path, CIRCUITS_SHA256), str(path))


def read_pinned_suite(directory: str | Path, name: str) -> Suite:
    if name not in SUITE_SHA256:
        raise StacklmError(f"no pinned suite {name!r}; pinned: {', '.join(SUITE_SHA256)}")
    path = Path(directory) / SUITE_FOLDER / f"{name}.json"
    return suite_from_dict(_pinned_json(path, SUITE_SHA256[name]), str(path))


@dataclass(frozen=True)
class SGResult:
    suites: tuple[SuiteResult, ...]  # in the circuits' order
    scores: SGScores
    circuits: tuple[Circuit, ...]  # the circuits scored (those of ``suites`` alone on a subset)


def score_all(
    directory: str | Path,
    words: frozenset[str],
    log_probs: TokenLogProbs,
    suites: tuple[str, ...] | None = None,
    on_suite: Callable[[SuiteResult], None] | None = None,
) -> SGResult:
    """Every (item, prediction) result of the circuits' suites, and the SG score and circuits.

    ``suites`` restricts the run to some suites (a small preset); the circuits then keep only
    those suites, and a circuit left without any is dropped. ``on_suite`` hears of each suite
    once it is scored (a progress line).
    """
    circuits = read_pinned_circuits(directory)
    if suites is not None:
        unknown = sorted(set(suites) - {s for c in circuits for s in c.suites})
        if unknown:
            raise StacklmError(f"suites in no circuit: {unknown}")
        kept = (Circuit(c.name, tuple(s for s in c.suites if s in suites)) for c in circuits)
        circuits = tuple(c for c in kept if c.suites)
    results: list[SuiteResult] = []
    for name in (name for circuit in circuits for name in circuit.suites):
        results.append(score_suite(read_pinned_suite(directory, name), words, log_probs))
        if on_suite is not None:
            on_suite(results[-1])
    return SGResult(tuple(results), sg_scores({result.suite: result.accuracy for result in results}, circuits), circuits)
