"""examples/vowels.py, the search benchmark's second data set: the ``.ts`` reader, the one-line
answer when the package that ships the data is missing or ships other data, and (where sktime
is installed: the ``bench`` extra, which ``make test`` does not install) the real files."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from devicefit.simulator.errors import install_command
from examples import vowels

HAS_SKTIME = importlib.util.find_spec(vowels.PACKAGE) is not None
needs_sktime = pytest.mark.skipif(not HAS_SKTIME, reason="sktime (the bench extra) is not "
                                  "installed: the data ships inside its wheel")


def test_read_ts_gives_each_utterance_as_frames_by_coefficients(tmp_path):
    path = tmp_path / "tiny.ts"
    path.write_text("# a comment\n@problemName tiny\n@data\n"
                    "1,2,3:4,5,6:3\n"
                    "7,8:9,10:1\n")
    series, labels = vowels.read_ts(path)
    assert [s.tolist() for s in series] == [[[1, 4], [2, 5], [3, 6]], [[7, 9], [8, 10]]]
    assert labels.tolist() == [2, 0]


def test_a_missing_package_is_one_line_naming_the_install(monkeypatch):
    monkeypatch.setattr(vowels, "PACKAGE", "devicefit-no-such-package")
    with pytest.raises(vowels.MissingDataset) as err:
        vowels.load_vowels()
    assert str(err.value) == ("Japanese Vowels ships inside devicefit-no-such-package, which "
                              f"is not installed: {install_command('bench')} (or "
                              "devicefit-no-such-package==1.2.0)")


@needs_sktime
def test_other_data_under_the_same_name_is_refused(monkeypatch):
    monkeypatch.setitem(vowels.SHA256, "TRAIN", "0" * 64)
    with pytest.raises(vowels.MissingDataset, match="is not the data this benchmark was "
                                                    "measured on"):
        vowels.load_vowels()


@needs_sktime
def test_the_shipped_set_is_270_and_370_padded_utterances_of_nine_speakers():
    data = vowels.load_vowels()
    assert data.train.x.shape == (270, 29, 12) and data.test.x.shape == (370, 29, 12)
    assert data.train.x.dtype == np.float32
    assert np.bincount(data.train.y).tolist() == [30] * 9  # 30 utterances per speaker
    assert sorted(set(data.test.y.tolist())) == list(range(9))
    # z-scored with the training frames' statistics: padding (zeros) aside, mean 0, std 1
    frames = data.train.x[np.any(data.train.x != 0, axis=-1)]
    assert np.allclose(frames.mean(axis=0), 0, atol=1e-5)
    assert np.allclose(frames.std(axis=0), 1, atol=1e-4)
