"""The upstream datasets, pinned by commit and sha256, and the German passivization repair.

Upstream publishes, for every task, a validation ("dev") and a generalization ("gen") file
(McCoy et al. 2020; Mueller et al. 2022). They are fetched from their pinned commit by URL or
read from a local mirror folder laid out as ``<mirror>/<task>/<file name>`` (the layout of the
reference copies), and refused unless their sha256 matches. No pinned checksum exists for the
upstream train and test files, so the ``upstream`` source takes validation and generalization
from upstream and draws train and test from the grammar (datasets.md §0.3).

Repair (paper App. A, datasets.md §7): Mueller's German passivization script never puts a
singular object noun into the nominative, giving ``der Löwen wurde``. In a ``passiv`` target
whose first token is a nominative singular determiner and whose second is ``Löwen`` or
``Raben``, the second token loses its final ``n``.
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

from stacklm.data.examples import parse_line
from stacklm.errors import StacklmError
from stacklm.tasks.example import Example

MCCOY = ("tommccoy1/rnn-hierarchical-biases", "f34a87c4fe804cb288d0527daa9c251def0ae24e")
MUELLER = ("sebschu/multilingual-transformations", "e848833f2df7674022ef02e2b649482d23ade7a7")


@dataclass(frozen=True)
class UpstreamFile:
    repository: str
    commit: str
    path: str  # inside the repository
    sha256: str

    @property
    def url(self) -> str:
        return f"https://raw.githubusercontent.com/{self.repository}/{self.commit}/{self.path}"

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def _files(origin: tuple[str, str], stem: str, validation: str, generalization: str) -> dict[str, UpstreamFile]:
    return {"validation": UpstreamFile(*origin, f"{stem}.dev", validation), "generalization": UpstreamFile(*origin, f"{stem}.gen", generalization)}


UPSTREAM: dict[str, dict[str, UpstreamFile]] = {
    "question-formation": _files(MCCOY, "data/question", "bfa06ca46316917089e97c3c3f653fa3d1e786c9a0fa51b52d491bb0f471fdcb", "037ae76f30c2df9779f02ff7245b6e798a79a264d456f9511839aafebc02e817"),
    "tense-reinflection-do": _files(MCCOY, "data/tense_aux", "7de9ec2d65d7ebf571100d77c939f4dbface8390cfe8c1733f9212e21bb2e7fa", "abc0cdfa9df9206fb7ac4ff8d5ed9842e9e1c07b88f6dc7c54579e59b9f574c9"),
    "tense-reinflection": _files(MCCOY, "data/tense", "c05259d7ca49f0e9745afede03c6edeb9c863b912a736d04cbadb8c6c5a1da95", "8465478028531cbd66aebad54f40d2823c753e5c04be769b8cedc7aa0a95d39b"),
    "german-question-formation": _files(MUELLER, "data/question_have-can_withquest_de/question_have_can.de", "8f1999c42095e05a02aa31efebb81d17b87c978798cba80c3941d8ec5ddae7e3", "d70c09874351480f2c89a0e030e1213ed1d26c8fb177921478ff0696f97dc6e2"),
    "passivization": _files(MUELLER, "data/passiv_en_nps/passiv_en_nps", "e2024b0c6030957df2049329d42e9fc3dce8d8c9d0d7bca22a0940b19c747db7", "f3bae2fa6349038179828515be30eb8778e6de0a93ae443c0b4c220ecd71c902"),
    "question-formation-have": _files(MUELLER, "data/question_have-havent_en/question_have", "86377cfb304710c81832c0e5edf632a4c28177537498dee3cdc951d8d8341529", "550b5df65ae27a2a1c5ea4b191a015180788fe0ce30da7df1e63cd327044a93a"),
    "german-passivization": _files(MUELLER, "data/passiv_de_nps/passiv_de_nps", "d8d776d96a1df5a4aa123862fd061aa5ffbf1259bb2ded0a9398edab1cf4319c", "68c7918e359c30a2aa90566e1684517d04aa96b9553fc66aba919f99cf99a944"),
}
UPSTREAM_SPLITS = ("validation", "generalization")
REPAIRED_TASKS = ("german-passivization",)
NOMINATIVE_SINGULAR_DETERMINERS = frozenset("der ein mein dein unser ihr".split())
BAD_NOMINATIVES = frozenset(("Löwen", "Raben"))


def upstream_file(task: str, split: str) -> UpstreamFile:
    if task not in UPSTREAM:
        raise StacklmError(f"no upstream data for task {task!r}")
    if split not in UPSTREAM[task]:
        raise StacklmError(f"upstream has no pinned {split!r} file for {task!r}; pinned: {', '.join(UPSTREAM_SPLITS)}")
    return UPSTREAM[task][split]


def fetch_bytes(task: str, split: str, mirror: str | Path | None) -> bytes:
    """The upstream file's bytes, from ``mirror`` when given, else by URL; sha256 checked."""
    file = upstream_file(task, split)
    if mirror is not None:
        path = Path(mirror) / task / file.name
        if not path.is_file():
            raise StacklmError(f"{path}: upstream mirror file not found (expected {file.name} from {file.repository}@{file.commit[:12]})")
        data, origin = path.read_bytes(), str(path)
    else:
        try:
            with urllib.request.urlopen(file.url, timeout=60) as response:
                data = response.read()
        except (urllib.error.URLError, OSError) as error:
            raise StacklmError(f"{file.url}: download failed ({error}); configure data.upstream_mirror to work offline") from None
        origin = file.url
    digest = hashlib.sha256(data).hexdigest()
    if digest != file.sha256:
        raise StacklmError(f"{origin}: sha256 {digest} does not match the pinned {file.sha256}")
    return data


def repair_example(example: Example) -> Example:
    """The App. A correction of one German passivization example (others pass unchanged)."""
    target = example.target
    if example.marker != "passiv" or len(target) < 2 or target[0] not in NOMINATIVE_SINGULAR_DETERMINERS or target[1] not in BAD_NOMINATIVES:
        return example
    return replace(example, target=(target[0], target[1][:-1]) + target[2:])


def read_upstream(task: str, split: str, mirror: str | Path | None) -> list[Example]:
    """The upstream split as examples (checked as ``fetch_bytes`` checks; lines named by file)."""
    text = fetch_bytes(task, split, mirror).decode("utf-8")
    name = upstream_file(task, split).name
    return [parse_line(line, name, number) for number, line in enumerate(text.splitlines(), start=1)]
