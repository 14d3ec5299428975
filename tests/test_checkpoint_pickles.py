"""`checkpoint_pickles`, the package's one reader of pickles (issue 47, class 1): a pickle that would run code, through
any callable, is refused before anything is called; a checkpoint's real index reads, as inert records and as torch's
own classes. The verbs' refusals are in the tests of each verb (hf export, plan's restore_from, the resume's choice,
the smoke judge), on the files each reads."""

from __future__ import annotations

import io
import pickle

import pytest
from _pickles import CALLS, RunsCode, live

from nemo_recipes.checkpoint_pickles import UnsafePickle, check_torch_file, load


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("real", [False, True])
def test_a_pickle_that_would_run_code_is_refused_and_nothing_runs(call, real, tmp_path):
    marker = tmp_path / "ran"
    payload = pickle.dumps({"state_dict_metadata": {}, "planner_data": [RunsCode(marker, call)]})
    assert live(payload, marker)  # plain pickle runs it
    with pytest.raises(UnsafePickle) as refused:
        load(io.BytesIO(payload), real=real)
    assert call.rsplit(".", 1)[-1] in refused.value.name and not marker.exists()


def test_a_torch_file_that_would_run_code_is_refused_in_its_archive(tmp_path):
    torch = pytest.importorskip("torch")
    marker = tmp_path / "ran"
    blob = io.BytesIO()
    torch.save({"weight": torch.ones(2), "extra": RunsCode(marker, "subprocess.call")}, blob)
    with pytest.raises(UnsafePickle, match="subprocess"):
        check_torch_file(blob)
    assert not marker.exists()
    blob = io.BytesIO()
    torch.save({"weight": torch.ones(2), "step": 3}, blob)
    check_torch_file(blob)  # an ordinary one passes


def test_a_real_index_reads_as_records_and_as_torchs_classes(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader

    from nemo_recipes.checkpoint_pickles import read_index, unsafe_pickle

    dcp.save({"w": torch.ones(4, 2, dtype=torch.bfloat16), "o": {"step": 1}}, checkpoint_id=str(tmp_path), no_dist=True)
    mine, torchs = read_index(tmp_path, real=True), FileSystemReader(str(tmp_path)).read_metadata()
    assert (mine.state_dict_metadata, mine.storage_data) == (torchs.state_dict_metadata, torchs.storage_data)
    assert read_index(tmp_path).state_dict_metadata["w"].size == (4, 2)
    assert unsafe_pickle(tmp_path) is None
