from capscope.cli import main


def test_demo_data_command(tmp_path, capsys):
    assert main(["demo-data", "--out", str(tmp_path), "--n", "3", "--seed", "1"]) == 0
    assert len(list((tmp_path / "images").glob("*.png"))) == 3
    assert len((tmp_path / "captokeneval.jsonl").read_text().splitlines()) == 6
    assert "3 scenes" in capsys.readouterr().out


def test_resume_without_checkpoint_is_a_user_error(tmp_path, capsys):
    assert main(["train", "clip", "--out", str(tmp_path / "none.pt"), "--resume", "--steps", "1"]) == 2
    assert "no checkpoint" in capsys.readouterr().err
