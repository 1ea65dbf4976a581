"""The MnasNet / EfficientNet-B0 macro search space: architectures, sampling, encodings, counts."""
from anb.searchspace.arch import EFFICIENTNET_B0, Arch, StageChoice, as_arch
from anb.searchspace.counting import Counts, count, count_batch
from anb.searchspace.encoding import encode, encoding_names
from anb.searchspace.sampler import Sampler, sample
from anb.searchspace.space import ANB_SPACE, SEQ1D_SPACE, SearchSpace, StageSpec, get_space

__all__ = [
    "ANB_SPACE", "SEQ1D_SPACE", "EFFICIENTNET_B0", "Arch", "Counts", "Sampler", "SearchSpace",
    "StageChoice", "StageSpec", "as_arch", "count", "count_batch", "encode", "encoding_names",
    "get_space", "sample",
]
