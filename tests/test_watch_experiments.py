"""`watch EXPERIMENT` for a job whose logs are not on this machine: a Kubernetes job (its logs live in its pods). There
is no Kubernetes cluster here, and none is faked: the experiment is the one NeMo-Run's own dry run writes for the
kubernetes preset, and the TrainJob's name is recorded by NeMo-Run's own writer of `.kubeflow_jobs.json`, as its
scheduler does on a submission. A local experiment that trained is watched in test_smoke_training.py (by id and
title), one whose job failed in test_cli_export_launch.py."""

from __future__ import annotations

import json
import os
import sys

import pytest
from _cli import cli

pytestmark = pytest.mark.nemo


def test_a_kubernetes_experiment_names_where_its_logs_are_and_the_command(nemorun_home, kubeconfig_file, monkeypatch):
    import nemo_run as run
    from nemo_run.run.torchx_backend.schedulers.kubeflow import _save_job_dir

    from nemo_recipes.executors import kubernetes

    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_file))
    executor = kubernetes(namespace="training", gpus_per_node=8)
    with run.Experiment("gpt-k8s", executor=executor, log_level="WARN") as experiment:
        experiment.add(run.Script(inline="true"), executor=executor, name="train")
        experiment.dryrun(log=False, delete_exp_dir=False)
    experiment_id = experiment._id
    # What NeMo-Run's Kubeflow scheduler records when it submits (schedulers/kubeflow.py: app id and TrainJob name).
    _save_job_dir(f"{experiment_id}___train___gpt-k8s-1a2b3c", "RUNNING", executor, job_name="gpt-k8s-1a2b3c")
    for target in (experiment_id, "gpt-k8s"):
        result = cli("watch", target, NEMORUN_HOME=str(nemorun_home))
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
        said = result.stderr
        assert f"experiment {experiment_id}: no log of it on this machine" in said
        assert "TrainJob gpt-k8s-1a2b3c, namespace training" in said
        assert "kubectl logs -l jobset.sigs.k8s.io/jobset-name=gpt-k8s-1a2b3c -n training --prefix" in said
        assert f"nemo experiment logs {experiment_id} 0" in said
    assert json.loads((nemorun_home / ".kubeflow_jobs.json").read_text())  # NeMo-Run's record, read as written


def test_a_slurm_experiment_submitted_over_ssh_names_the_clusters_job_directory(nemorun_home, monkeypatch):
    """NeMo-Run's own dry run of the slurm preset over SSH (nothing connects): the logs are on the cluster, in the
    tunnel's job directory, and `watch` says so (exit 1) instead of reading the local copy of the experiment."""
    import nemo_run as run

    from nemo_recipes.executors import slurm

    executor = slurm(account="acct", nodes=1, tunnel="ssh", host="login.example.com", user="alice", job_dir="/lustre/a")
    with open(os.devnull) as devnull:  # NeMo-Run's local commands (invoke) read stdin; pytest's refuses
        monkeypatch.setattr(sys, "stdin", devnull)
        with run.Experiment("gpt-ssh", executor=executor, log_level="WARN") as experiment:
            experiment.add(run.Script(inline="true"), executor=executor, name="train")
            experiment.dryrun(log=False, delete_exp_dir=False)
    result = cli("watch", experiment._id, NEMORUN_HOME=str(nemorun_home))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "job train ran on Slurm over SSH: its logs are log-train_<jobid>_<restart>.out in /lustre/a" in result.stderr
    assert f"nemo experiment logs {experiment._id} 0" in result.stderr
