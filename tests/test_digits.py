"""The bundled digits are scikit-learn's, read from its data file without importing
``sklearn.datasets``."""
from __future__ import annotations

import numpy as np


def test_digits_table_is_sklearns_load_digits():
    from sklearn.datasets import load_digits

    from anb.digits import digits_table

    images, labels = digits_table()
    digits = load_digits()
    np.testing.assert_array_equal(images, digits.images)
    np.testing.assert_array_equal(labels, digits.target)
    assert images.dtype == np.float64 and labels.dtype == np.int64


def test_the_bundled_digits_split_is_fixed():
    """80/20 by a permutation of seed 0: the first validation image's label and the counts."""
    from anb.digits import digits_table, digits_tensors

    (x_train, y_train), (x_val, y_val) = digits_tensors(8)
    _, labels = digits_table()
    order = np.random.default_rng(0).permutation(len(labels))
    assert (len(y_train), len(y_val)) == (1437, 360)
    np.testing.assert_array_equal(y_val.numpy(), labels[order[1437:]])
    assert tuple(x_train.shape) == (1437, 3, 8, 8)
