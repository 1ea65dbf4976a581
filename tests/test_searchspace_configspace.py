"""ConfigSpace export and back."""
from anb.searchspace import ANB_SPACE, EFFICIENTNET_B0
from anb.searchspace.configspace import from_configuration, to_configspace, to_configuration


def test_configspace_has_the_same_size_and_names():
    cs = to_configspace(space=ANB_SPACE)
    assert len(cs) == 28
    assert cs.estimate_size() == ANB_SPACE.size()
    assert set(cs.keys()) == set(EFFICIENTNET_B0.to_anb_dict())


def test_round_trip_and_sampled_configurations_are_in_the_space():
    cs = to_configspace(seed=1, space=ANB_SPACE)
    assert from_configuration(to_configuration(EFFICIENTNET_B0, cs, space=ANB_SPACE),
                              space=ANB_SPACE) == EFFICIENTNET_B0
    archs = [from_configuration(c, space=ANB_SPACE) for c in cs.sample_configuration(50)]
    assert all(ANB_SPACE.contains(a) for a in archs)
    assert len(set(archs)) == 50
