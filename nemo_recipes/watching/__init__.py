"""Watch a training run against its plan: read the lines NeMo prints (`progress_log`), find a run's log and recipe
(`sources`), measure it and compare it with the planner (`figures`), flag what a person must know at once (`flags`),
and write the run's record (`card`)."""
