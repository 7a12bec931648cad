"""A user-written architecture family for tests/sdk/search/test_search.py, as a user would write
one (``module:function``, taking the search's Params)."""

from __future__ import annotations

from typing import Any


def tiny(params: Any) -> Any:
    import keras
    from keras import layers

    inp = keras.Input(params.input_shape)
    x = layers.Dense(int(8 * params.width), activation="relu")(layers.Flatten()(inp))
    return keras.Model(inp, layers.Dense(params.classes)(x))


def not_a_model(params: Any) -> Any:
    return None
