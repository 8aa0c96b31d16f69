"""The upstream datasets, pinned by commit and git blob id, and the German passivization repair.

Upstream publishes, for every task, train, validation ("dev"), test and generalization ("gen")
files (McCoy et al. 2020; Mueller et al. 2022). Each is fetched from its pinned commit by URL or
read from a local mirror folder laid out as ``<mirror>/<task>/<file name>`` (the layout of the
reference copies), and refused unless its git blob id — sha1 of ``b"blob <size>\\0" + bytes``,
what ``git hash-object`` prints, and what the pinned commit's tree records — matches, and its
sha256 too where one is pinned. Files are taken as upstream wrote them: a tampered, truncated
or CRLF copy has another blob id.

Every split of every task is pinned. The train files of ``tense-reinflection``,
``tense-reinflection-do`` and ``question-formation-have`` are pinned by blob id only (no copy of
them was available to take a sha256 from).

Repair (DuSell & Cotterell (2025), App. A): Mueller's German passivization script never puts a
singular object noun into the nominative, giving ``der Löwen wurde``. In a ``passiv`` target
whose first token is a nominative singular determiner and whose second is ``Löwen`` or
``Raben``, the second token loses its final ``n``. It applies to every split of that task.
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
UPSTREAM_SPLITS = ("train", "validation", "test", "generalization")
UPSTREAM_LINES = {"train": 100_000, "validation": 1_000, "test": 10_000, "generalization": 10_000}  # every pinned file's
SUFFIXES = {"train": "train", "validation": "dev", "test": "test", "generalization": "gen"}


def git_blob_id(data: bytes) -> str:
    """The id git gives ``data`` as a blob: sha1 of ``b"blob <size>\\0" + data``."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class UpstreamFile:
    repository: str
    commit: str
    path: str  # inside the repository
    blob: str  # git blob id
    sha256: str | None = None

    @property
    def url(self) -> str:
        return f"https://raw.githubusercontent.com/{self.repository}/{self.commit}/{self.path}"

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def origin(self) -> str:
        return f"{self.repository}@{self.commit[:12]}:{self.path}"

    def check(self, data: bytes, where: str) -> None:
        """Raise unless ``data`` has the pinned blob id (and sha256, where pinned), naming
        ``where`` and both hashes."""
        blob = git_blob_id(data)
        if blob != self.blob:
            raise StacklmError(f"{where}: git blob id {blob} does not match the pinned {self.blob} of {self.origin} "
                               f"({len(data)} bytes; a modified, truncated or CRLF copy?)")
        if self.sha256 is not None and (digest := hashlib.sha256(data).hexdigest()) != self.sha256:
            raise StacklmError(f"{where}: sha256 {digest} does not match the pinned {self.sha256} of {self.origin}")


def _files(origin: tuple[str, str], stem: str, pins: dict[str, tuple[str, str | None]]) -> dict[str, UpstreamFile]:
    """One task's files ``<stem>.<suffix>``: ``pins`` maps each split to (blob id, sha256 or None)."""
    return {split: UpstreamFile(*origin, f"{stem}.{SUFFIXES[split]}", *pins[split]) for split in UPSTREAM_SPLITS}


UPSTREAM: dict[str, dict[str, UpstreamFile]] = {
    "question-formation": _files(MCCOY, "data/question", {
        "train": ("a3e63ea441226643b6fa7341ba8af22721019331", "e8f43af8072f64fc727baa4b46ca4c07b88c77dcc4517a8a7b53d80549966356"),
        "validation": ("052004271fbf01dd0f02ad339d0d85fef77ddfc8", "bfa06ca46316917089e97c3c3f653fa3d1e786c9a0fa51b52d491bb0f471fdcb"),
        "test": ("9d999b4c135aeabde906df81bce08d96b07f2bf4", "498cd58830b732b6f5f40ad32f67a8f0d84dd73ad59c5035ec7c78bde75f280e"),
        "generalization": ("adf8cd0b3fc13e92ed12f6bc536024374c1f7156", "037ae76f30c2df9779f02ff7245b6e798a79a264d456f9511839aafebc02e817"),
    }),
    "tense-reinflection-do": _files(MCCOY, "data/tense_aux", {
        "train": ("cc2b86fbaa1257759d59faf39cc0cd5b6fd57201", None),
        "validation": ("ddb3dcb9669965ef88415b2d00f0f983a3e5089d", "7de9ec2d65d7ebf571100d77c939f4dbface8390cfe8c1733f9212e21bb2e7fa"),
        "test": ("1b5e3d393035dff2a15256aca651573a4d6344ab", "0b6d6c666a07c564e005ae6f73c9e7a4a085c757ef0e06a1c2c7b9a41a4cec2c"),
        "generalization": ("e60036151e4abdbd25f5addd82bdd131f0da6d75", "abc0cdfa9df9206fb7ac4ff8d5ed9842e9e1c07b88f6dc7c54579e59b9f574c9"),
    }),
    "tense-reinflection": _files(MCCOY, "data/tense", {
        "train": ("01a299dac719710f91bff6346f3218b4063d98e6", None),
        "validation": ("1bf83b37ca8beaae30bcd767baef7a1adad877cf", "c05259d7ca49f0e9745afede03c6edeb9c863b912a736d04cbadb8c6c5a1da95"),
        "test": ("f60aa32f94adf4dfc39fb481e036f7d1fe77b4c4", "26acb1e6bbc911b69040940ccaa018e3ef4efe781f6e4eb711c40f39b7651ac2"),
        "generalization": ("23d0870c1bde430a65a2191e3661e1373f7966b2", "8465478028531cbd66aebad54f40d2823c753e5c04be769b8cedc7aa0a95d39b"),
    }),
    "german-question-formation": _files(MUELLER, "data/question_have-can_withquest_de/question_have_can.de", {
        "train": ("7a24a9e667644083a0b04376b6dbb0ad3e801818", "02d754a681a3ba616f522d13650ca2539abe313abbef31212c80519687c2c1d4"),
        "validation": ("c0bcb811db30fd74e69c70eb4ee4c8358dd19011", "8f1999c42095e05a02aa31efebb81d17b87c978798cba80c3941d8ec5ddae7e3"),
        "test": ("6e5f69d4b162900bc049f561c1eb5ec075e4d322", "056b1f9628ca7a23994eaef8a9fc0028b1ab055cc098dbb4786c16095d0ebfa8"),
        "generalization": ("10f732118824e84570a674750ce51c254eaec768", "d70c09874351480f2c89a0e030e1213ed1d26c8fb177921478ff0696f97dc6e2"),
    }),
    "passivization": _files(MUELLER, "data/passiv_en_nps/passiv_en_nps", {
        "train": ("78eb857c738feba287f8873fb3bd66f2e955f31c", "45ade8e0bea11b064c709a65bc9f195a9719751e9f7a67e349a75a49d3e9936a"),
        "validation": ("333f5de1be03ae6440f14c6b96931e3e06278fa2", "e2024b0c6030957df2049329d42e9fc3dce8d8c9d0d7bca22a0940b19c747db7"),
        "test": ("4eba5f86315a1e4bfafc29add3936baadde739e4", "3d51ce92e274c4745eab84ba4f21391f8a6f88fcf2ab63d14ec765455f5bf4d9"),
        "generalization": ("1755fa366373e7e38909c1c4a4ece99b141d0751", "f3bae2fa6349038179828515be30eb8778e6de0a93ae443c0b4c220ecd71c902"),
    }),
    "question-formation-have": _files(MUELLER, "data/question_have-havent_en/question_have", {
        "train": ("99eb13b7d9a1f146d0777c9a5bf012807f4ec8b7", None),
        "validation": ("ddabe739c007b3ce430a04c5cd96c01fe593dc36", "86377cfb304710c81832c0e5edf632a4c28177537498dee3cdc951d8d8341529"),
        "test": ("597d30c484504cd4f0fa2377e9f27797e1cb1f6a", "4fc309dab2542dff7f0117b3e3d255eec963e4f86161c60e3eddbe8200505193"),
        "generalization": ("d79aba2e4f6ed2a292809d664321ba86089df12f", "550b5df65ae27a2a1c5ea4b191a015180788fe0ce30da7df1e63cd327044a93a"),
    }),
    "german-passivization": _files(MUELLER, "data/passiv_de_nps/passiv_de_nps", {
        "train": ("455bd6d7e3145457d7ae60bfab50186ae52a8f02", "2d83ec23e748dee863e7d36a69fbd59a4c970ec5104a9c415e62bb98117943ba"),
        "validation": ("0aa0e224bc0e95f344db8c32e1ce737e6f9106a4", "d8d776d96a1df5a4aa123862fd061aa5ffbf1259bb2ded0a9398edab1cf4319c"),
        "test": ("c55ea08be6316b833b2af49390e66a6e213c7e61", "bab8c57a50907176b9e78312bd60a8bd0e428ce4061dee50dbcbb9f44fd8bc8a"),
        "generalization": ("f8880e0986981caa0dca5016bd05021043bf9620", "68c7918e359c30a2aa90566e1684517d04aa96b9553fc66aba919f99cf99a944"),
    }),
}
REPAIRED_TASKS = ("german-passivization",)
NOMINATIVE_SINGULAR_DETERMINERS = frozenset("der ein mein dein unser ihr".split())
BAD_NOMINATIVES = frozenset(("Löwen", "Raben"))


def upstream_file(task: str, split: str) -> UpstreamFile:
    if task not in UPSTREAM:
        raise StacklmError(f"no upstream data for task {task!r}")
    if split not in UPSTREAM[task]:
        raise StacklmError(f"upstream has no {split!r} split; its splits: {', '.join(UPSTREAM_SPLITS)}")
    return UPSTREAM[task][split]


def mirror_path(task: str, split: str, mirror: str | Path) -> Path:
    """Where a mirror folder holds the upstream file: ``<mirror>/<task>/<file name>``."""
    return Path(mirror) / task / upstream_file(task, split).name


def fetch_bytes(task: str, split: str, mirror: str | Path | None) -> bytes:
    """The upstream file's bytes, from ``mirror`` when given, else by URL; blob id (and sha256)
    checked."""
    file = upstream_file(task, split)
    if mirror is not None:
        path = mirror_path(task, split, mirror)
        if not path.is_file():
            raise StacklmError(f"{path}: upstream mirror file not found (expected {file.name} from {file.origin}, git blob {file.blob})")
        data, where = path.read_bytes(), str(path)
    else:
        try:
            with urllib.request.urlopen(file.url, timeout=60) as response:
                data = response.read()
        except (urllib.error.URLError, OSError) as error:
            raise StacklmError(f"{file.url}: download failed ({error}); configure data.upstream_mirror to work offline") from None
        where = file.url
    file.check(data, where)
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
