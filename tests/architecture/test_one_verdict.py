"""One verdict (issue 70): nothing below the commands defaults the word and
region rule; the commands and `Verdict.from_config` read it from the user's
flags and config, and every other function is handed it."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ("metrics", "app", "annotation", "db")
RULE_NAMES = {"token_rule", "region_rule", "rule", "beta", "word_scale", "word_threshold_scale", "verdict"}
# not the token rule's β: the random walker's edge weight (click segmenting)
NOT_THE_RULE = {("metrics/click_classic.py", "__init__", "beta")}
# None there means "the config's rule", not one of its own
NO_OVERRIDE = {("app/server/api.py", "create_app", "token_rule")}
# still defaulting, to be handed the rule (issue 70 follow-up): this list only shrinks
PENDING: set[tuple[str, str, str]] = set()


def defaulted_rule_parameters() -> set[tuple[str, str, str]]:
    """(file, function, parameter) of every rule parameter with a default, outside app/commands/."""
    found = set()
    for folder in PACKAGE:
        for path in (ROOT / folder).rglob("*.py"):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith("app/commands/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found |= {(name, node.name, p) for p in _defaulted(node.args) if p in RULE_NAMES}
    return found - NOT_THE_RULE


def _defaulted(args: ast.arguments) -> list[str]:
    positional = args.posonlyargs + args.args
    with_default = positional[len(positional) - len(args.defaults):]
    keyword = [a for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return [a.arg for a in with_default + keyword]


def test_nothing_below_the_commands_defaults_a_token_rule():
    assert defaulted_rule_parameters() - NO_OVERRIDE - PENDING == set()


def test_the_pending_list_only_shrinks():
    assert PENDING - defaulted_rule_parameters() == set(), "fixed: take it off PENDING"


def test_the_deciding_homes_take_the_rule_without_a_default():
    """The metrics, the evaluation, the stored verdicts and the shading: none is pending."""
    homes = ("metrics/", "app/bench/", "annotation/captioners.py", "app/ui/caption_shading.py", "app/train/")
    assert not [entry for entry in PENDING if entry[0].startswith(homes)]
