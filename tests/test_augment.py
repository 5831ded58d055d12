import jax
import jax.numpy as jnp
import numpy as np

from iterlin.augment import flip_and_crop


def test_each_output_is_a_flipped_or_unflipped_shifted_window():
    x = jax.random.normal(jax.random.PRNGKey(0), (16, 6, 6, 2))
    out = np.asarray(flip_and_crop(jax.random.PRNGKey(1), x, pad=2))
    flips = 0
    for img, o in zip(np.asarray(x), out):
        matches = []
        for flipped in (img, img[:, ::-1]):
            padded = np.pad(flipped, ((2, 2), (2, 2), (0, 0)))
            matches += [
                np.array_equal(padded[i : i + 6, j : j + 6], o) for i in range(5) for j in range(5)
            ]
        assert any(matches)
        flips += not any(matches[:25])
    assert 0 < flips < 16  # both outcomes happen


def test_zero_padding_keeps_the_image_or_its_mirror():
    x = jnp.arange(2 * 4 * 4 * 1.0).reshape(2, 4, 4, 1)
    out = flip_and_crop(jax.random.PRNGKey(3), x, pad=0)
    for img, o in zip(np.asarray(x), np.asarray(out)):
        assert np.array_equal(o, img) or np.array_equal(o, img[:, ::-1])
