"""Search spaces: the interface, the registry, sampling, encodings and exact counts."""
from anb.searchspace.arch import EFFICIENTNET_B0, Arch, StageChoice, as_arch
from anb.searchspace.base import CostTable, CostUnits, Space, SpaceArch, Task, UnitCosts, Variable
from anb.searchspace.counting import Counts, count, count_batch
from anb.searchspace.encoding import encode, encoding_names
from anb.searchspace.registry import DEFAULT_SPACE, get_space, space_names
from anb.searchspace.sampler import Sampler, sample
from anb.searchspace.space import ANB_SPACE, SEQ1D_SPACE, SearchSpace, StageSpec

__all__ = [
    "ANB_SPACE", "DEFAULT_SPACE", "EFFICIENTNET_B0", "SEQ1D_SPACE", "Arch", "CostTable",
    "CostUnits", "Counts", "Sampler", "SearchSpace", "Space", "SpaceArch", "StageChoice",
    "UnitCosts",
    "StageSpec", "Task", "Variable", "as_arch", "count", "count_batch", "encode",
    "encoding_names", "get_space", "sample", "space_names",
]
