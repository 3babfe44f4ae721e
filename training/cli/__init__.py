"""The command lines that are not the local trainer's (``python -m training.local``), one
module each. Each only reads its arguments and calls into the package that does the work:

- :mod:`training.cli.view`: ``gigpo-view``, a run as one HTML page (:mod:`training.viewer`);
- :mod:`training.cli.evaluate`: ``gigpo-evaluate``, held-out tasks and pinned suites played
  by any model (:mod:`training.evaluation`);
- :mod:`training.cli.study`: ``python -m training.study``, one recipe under several arms
  and seeds (:mod:`training.study`);
- :mod:`training.cli.quickstart`: ``gigpo-quickstart``, GiGPO on SmolLM2-135M-Instruct on
  CPU in minutes (the local trainer with ``training/configs/quickstart.yaml``);
- :mod:`training.cli.export`: ``gigpo-export``, a run's policy as a Hugging Face model
  directory, LoRA adapters merged (:mod:`training.local.trained`).

Read :mod:`training.cli.view` first, the shortest: its arguments, one call into
:mod:`training.viewer`, and its errors turned into exit 2.
"""
