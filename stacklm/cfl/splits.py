"""The splits of a CFL data set (DuSell & Chiang (2022) App. 8; ``docs/design/cfl-and-ptb.md#cfl-data-sets``):
their string lengths and sizes.
:mod:`stacklm.cfl.datasets` samples them; kept apart from the sampling, which imports torch,
so that the ``stacklm cfl`` command line offers the split names without it."""

BATCH_SIZE = 10  # strings per (length-homogeneous) batch, train and validation
TRAIN_BATCHES = 1_000
VALIDATION_BATCHES = 100
TEST_STRINGS_PER_LENGTH = 100
SPLIT_LENGTHS: dict[str, tuple[int, int]] = {"train": (40, 80), "validation": (40, 80), "test": (40, 100)}
