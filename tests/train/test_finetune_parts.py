"""Fine-tuning split into parts (the app/train/finetune/ package): `capscope.train.finetune`
still offers every name it offered, and fitting the word threshold is part of
the config, not a function the callers pass."""
import dataclasses
import inspect
import json

from capscope.cli import main
from capscope.train import finetune as entry

OFFERED = ("FIGURE_KEYS", "FROZEN", "SIDE_WORDS", "TRAIN_PARTS", "UNKNOWN", "Augment", "Cancelled", "CheckSet",
           "FinetuneConfig", "FinetuneError", "LabelledSet", "Split", "VisualTop", "WordKinds", "anchor_loss",
           "check_figures", "clip_inputs", "encode_items", "figures_path", "finetune", "format_report",
           "held_figures", "items_sha256", "keep_parent_outputs", "label_counts", "labelled", "load_parent",
           "mirror_boxes", "names_a_side", "parent_half", "parent_loss", "preprocess_normalization", "region_loss",
           "replay_items", "resolved_replay", "share_loss", "slot", "split_by_image", "swapped_items",
           "token_losses", "train_head", "trainable_parameters")


def test_the_entry_offers_every_name_it_offered_before_the_split():
    assert [name for name in OFFERED if not hasattr(entry, name)] == []
    assert set(entry.__all__) == set(OFFERED)


def test_the_threshold_fitting_is_a_config_choice_on_by_default():
    fields = {f.name: f.default for f in dataclasses.fields(entry.FinetuneConfig)}
    assert fields["fit_threshold"] is True
    assert list(inspect.signature(entry.finetune).parameters) == ["config", "evaluate_gold"]


def test_the_command_line_turns_the_fit_off_through_the_config(tmp_path, monkeypatch, capsys):
    item = {"id": "a", "image": "a.png", "caption": "a red circle", "regions": [{"box": [0, 0, 4, 4]}],
            "tokens": [{"text": "red", "start": 2, "end": 5, "semantic": True, "label": "correct"}]}
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps(item) + "\n")
    seen = []

    def record(config, evaluate_gold=None):
        seen.append(config.fit_threshold)
        return {"recorded": True}

    monkeypatch.setattr(entry, "finetune", record)
    for extra in ([], ["--no-fit-threshold"]):
        assert main(["train", "infometic", "--labels", str(labels), "--init", "demo", "--out",
                     str(tmp_path / "child.pt"), "--json", *extra]) == 0
    assert seen == [True, False]
    assert capsys.readouterr().out.count('"recorded": true') == 2
