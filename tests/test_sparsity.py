import pytest
import torch

from zoo.core.sparsity import SparsityReport


def test_density_weights_layers_by_size():
    r = SparsityReport(
        {"fc0.weight": torch.tensor([[True, False], [False, False]]), "fc1.weight": torch.ones(6) > 0}
    )
    assert r.density == pytest.approx(7 / 10)
    assert r.per_site() == {"fc0.weight": 0.25, "fc1.weight": 1.0}
    assert r.as_dict()["density"] == pytest.approx(0.7)
    with pytest.raises(TypeError, match="masks"):
        SparsityReport({"a": torch.ones(3)})
