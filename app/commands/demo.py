"""Demo world commands: `demo-data`, `train clip`, `train infometic`, `train demo`
(docs/formats.md §9) and `evaluate` (docs/formats.md §6)."""
from __future__ import annotations

from pathlib import Path

from capscope.metrics.config import DEVICES, add_flags
from capscope.demo.shifts import SHIFTS
from capscope.common.errors import CapscopeError
from capscope.commands.finetuning import run_finetune
from capscope.train.finetune.defaults import HOLDOUT, MINUTES as FINETUNE_MINUTES


COCO_SCENES = 48
LEADERBOARD_DRAWS = 1000
COCO_CAPTIONERS = ("colours", "nearly-clean")


def register(sub) -> None:
    data = sub.add_parser("demo-data", help="write synthetic scenes with gold labels and a training file")
    data.add_argument("--out", required=True, type=Path, help="output folder")
    data.add_argument("--n", type=int, default=500, help="number of scenes (each gives a clean and a polluted caption)")
    data.add_argument("--seed", type=int, default=0)
    data.add_argument("--shift", choices=SHIFTS, default=None,
                      help="draw the scenes in a changed appearance the demo model never saw (labels unchanged)")
    data.add_argument("--judgements", action="store_true",
                      help="also write judgements/flickr8k.json: graded captions rated by three simulated raters "
                           "(Flickr8k-Expert layout, docs/human-judgements.md)")
    data.add_argument("--coco", type=int, nargs="?", const=COCO_SCENES, default=None, metavar="N",
                      help=f"also write OUT/coco/: N more scenes (default {COCO_SCENES}) as a COCO captions file with its "
                           "images, and two captioners' COCO results (colours: a wrong colour word in 60%% of its "
                           "captions; nearly-clean: in 10%%), ready for `capscope diagnose`")
    data.set_defaults(func=run_demo_data)

    train = sub.add_parser("train", help="train capscope's own models")
    targets = train.add_subparsers(dest="target", required=True, metavar="TARGET")
    clip = targets.add_parser("clip", help="a tiny open_clip model from scratch on demo scenes")
    clip.add_argument("--out", required=True, type=Path, help="checkpoint file (open_clip state dict)")
    clip.add_argument("--minutes", type=float, default=None, help="training time budget (default 15 unless --steps)")
    clip.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    clip.add_argument("--seed", type=int, default=0)
    clip.add_argument("--device", choices=DEVICES, default="auto")
    clip.add_argument("--resume", action="store_true", help="continue from OUT's training state")
    clip.add_argument("--batch-scenes", type=int, default=48, help="fresh scenes drawn per step")
    clip.add_argument("--lr", type=float, default=5e-4)
    clip.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    clip.add_argument("--checkpoint-minutes", type=float, default=5.0)
    clip.add_argument("--probe-scenes", type=int, default=150, help="held-out scenes for the probe figures")
    clip.set_defaults(func=run_train_clip)
    register_train_infometic(targets)
    register_train_demo(targets)
    register_evaluate(sub)


def _training_options(parser, minutes: float) -> None:
    budget = f"15; fine-tuning: {FINETUNE_MINUTES:g}" if minutes is None else f"{minutes:g}"
    parser.add_argument("--minutes", type=float, default=minutes, help=f"training time budget (default {budget})")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=DEVICES, default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--checkpoint-minutes", type=float, default=5.0)


def _head_options(parser) -> None:
    parser.add_argument("--batch-size", type=int, default=16, help="images per step (each: clean, polluted, second caption)")
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default 7e-4; fine-tuning: 5e-4)")
    parser.add_argument("--intra-layers", type=int, default=2, help="layers of each intra-modal encoder")
    parser.add_argument("--inter-layers", type=int, default=2, help="layers of the inter-modal encoder")
    parser.add_argument("--demo-scenes", type=int, default=4000, help="demo scenes encoded once (captions are drawn afresh each step)")
    parser.add_argument("--probe-gold", type=Path, default=None, help="CapTokenEval file scored at every checkpoint")


def register_train_infometic(targets) -> None:
    head = targets.add_parser("infometic", help="an InfoMetIC head on a frozen CLIP (training file or demo scenes)")
    head.add_argument("--out", required=True, type=Path, help="checkpoint file (capscope-infometic/1)")
    head.add_argument("--data", type=Path, default=None, help="training file (docs/training-data.md); default: demo scenes")
    head.add_argument("--clip", type=Path, default=None, help="demo CLIP checkpoint from `capscope train clip`")
    head.add_argument("--clip-model", default=None, help="open_clip model name (when not --clip)")
    head.add_argument("--clip-pretrained", default=None, help="open_clip pretrained tag or file")
    head.add_argument("--resume", action="store_true", help="continue from OUT's training state")
    head.add_argument("--half", action="store_true", help="save fp16 weights")
    _training_options(head, None)
    _head_options(head)
    tune = head.add_argument_group("fine-tuning on labels (docs/fine-tuning.md)")
    tune.add_argument("--labels", type=Path, default=None, help="CapTokenEval file (as `capscope export` writes it)")
    tune.add_argument("--dataset", default=None, help="a dataset in the store: gold labels, else the judgements' majority")
    tune.add_argument("--db", default=None, help="database URL for --dataset (default: $CAPSCOPE_DB_URL or the local file)")
    tune.add_argument("--init", default=None, help="the checkpoint to start from: a file, or `demo` for the bundled model")
    tune.add_argument("--holdout", type=float, default=HOLDOUT, help="share of images held out for the before/after figures")
    tune.add_argument("--anchor", type=float, default=None, help="pull towards the parent's weights (L2-SP; default 0.05)")
    tune.add_argument("--train", choices=("head", "visual"), default="visual",
                      help="what learns: the head, or the head and CLIP's image tower (default)")
    tune.add_argument("--visual-blocks", type=int, default=None,
                      help="with --train visual: how many of the image tower's last blocks learn "
                           "(default 4: all of the demo CLIP's)")
    tune.add_argument("--swaps", type=int, default=None,
                      help="copies of each fully-correct item with one word swapped (labelled wrong; default 2); 0: none")
    tune.add_argument("--replay", default="auto",
                      help="labelled items of the parent's own world to mix in: a CapTokenEval file, `demo`, or `none` "
                           "(default: the demo world when --init is the demo model, else none)")
    tune.add_argument("--replay-items", type=int, default=None, help="how many replay items (default 400)")
    tune.add_argument("--keep-parent", type=float, default=None,
                      help="weight of the pull towards the parent's own attention on the replayed items "
                           "(distillation; default 1, 0: their labels alone)")
    tune.add_argument("--balanced-shares", action="store_const", const=True, default=None,
                      help="weigh wrong and correct words as equal halves in the share loss (default off: every "
                           "word the same, which keeps the verdicts' boundary where the labels put it)")
    tune.add_argument("--no-fit-threshold", action="store_true",
                      help="keep the token rule's word threshold (default: the child's word threshold is the rule's "
                           "times the scale, 0.3 to 1, with the best wrong-word F1 on its training items)")
    tune.add_argument("--augment", action="store_const", const=True, default=None,
                      help="with --train visual: new brightness, contrast and mirroring of the images each step "
                           "(default off; no mirroring when a caption says left or right)")
    tune.add_argument("--check-gold", type=Path, default=None,
                      help="another CapTokenEval file scored before and after (e.g. the parent's own world)")
    add_flags(tune, ["token_rule"])  # the verdicts of the before/after figures
    tune.add_argument("--json", action="store_true", help="print the report as one JSON object")
    head.set_defaults(func=run_train_infometic)


def register_train_demo(targets) -> None:
    demo = targets.add_parser("demo", help="the bundled demo model: `train clip`, then `train infometic` on it")
    demo.add_argument("--out", type=Path, default=None, help="model file (default: the packaged demo model)")
    demo.add_argument("--work", type=Path, default=Path("runs/demo"), help="folder for the CLIP and training state")
    demo.add_argument("--clip-minutes", type=float, default=65.0)
    demo.add_argument("--head-minutes", type=float, default=36.0)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--device", choices=DEVICES, default="auto")
    demo.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    demo.add_argument("--resume", action="store_true", help="continue both stages from WORK")
    demo.set_defaults(func=run_train_demo)


def register_evaluate(sub) -> None:
    ev = sub.add_parser("evaluate", help="token and region figures against CapTokenEval gold labels, or the "
                                         "leaderboard of a benchmark release")
    source = ev.add_mutually_exclusive_group(required=True)
    source.add_argument("--gold", type=Path, help="CapTokenEval JSONL")
    source.add_argument("--benchmark", type=Path, metavar="DIR",
                        help="a release folder (`capscope release`): its files checked against metadata.json, then "
                             "every metric's word and region AUROC, AP and F1 with 95%% bootstrap intervals over "
                             "images, by word type, and paired differences (docs/formats.md)")
    ev.add_argument("--metric", nargs="+", action="extend", default=None, metavar="NAME",
                    help="infometic, infoclip, hice, ...; with --gold one; with --benchmark one or more, given "
                         "several times or as several names (no --metric: every metric that judges words or regions)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    bench = ev.add_argument_group("with --benchmark")
    bench.add_argument("--draws", type=int, default=LEADERBOARD_DRAWS,
                       help=f"bootstrap draws over images (default {LEADERBOARD_DRAWS})")
    bench.add_argument("--seed", type=int, default=0, help="seed of the bootstrap draws (default 0)")
    bench.add_argument("--no-controls", action="store_true",
                       help="leave the control items out (by default they are in: their gold is an admin's)")
    ev.add_argument("--batch-size", type=int, default=32, help="pairs scored at once (default 32)")
    # each gold item brings its own regions; PAC-S and HICE-S's Alpha-CLIP judge no word or region here
    add_flags(ev, leave_out=("regions", "max_regions", "pacs_checkpoint", "alpha_clip_checkpoint"))
    ev.set_defaults(func=run_evaluate)


def run_demo_data(args) -> int:
    from capscope.demo.dataset import write_demo_data

    if args.n < 1 or (args.coco is not None and args.coco < 1):
        raise CapscopeError("--n and --coco must be at least 1")
    counts = write_demo_data(args.out, args.n, args.seed, shift=args.shift)
    print(f"wrote {counts['scenes']} scenes, {counts['gold_items']} gold items to "
          f"{args.out / 'captokeneval.jsonl'}, {counts['training_rows']} training rows to {args.out / 'train.jsonl'}")
    if args.judgements:
        from capscope.demo.judgements import JUDGEMENTS_FILE, write_judgements

        counts = write_judgements(args.out, args.n, args.seed)
        print(f"wrote {counts['judgements']} judgements ({counts['missing']} missing) of {counts['captions']} captions "
              f"on {counts['images']} images to {args.out / JUDGEMENTS_FILE}")
    if args.coco is not None:
        write_coco_example(args.out / "coco", args.coco, args.seed)
    return 0


def write_coco_example(folder: Path, n: int, seed: int) -> None:
    """Example input for `capscope diagnose`: `n` demo scenes under folder/images, a COCO
    captions file over them (three true captions each) and two captioners' COCO results."""
    from capscope.studies.diagnose_recovery import write_captioners

    write_captioners(folder, n, seed, swap_share=0.6, clean_share=0.1, captioners=COCO_CAPTIONERS)
    models = " ".join(f"--model {name}={folder / (name + '.json')}" for name in COCO_CAPTIONERS)
    print(f"wrote {n} scenes as COCO files to {folder}: captions.json, images/, "
          f"{', '.join(name + '.json' for name in COCO_CAPTIONERS)}; try\n"
          f"  capscope diagnose --annotations {folder / 'captions.json'} --images {folder / 'images'} {models} "
          f"--out {folder.parent / 'report'}")


def run_train_clip(args) -> int:
    from capscope.train.clip import ClipTrainConfig, train_clip

    if args.minutes is None and args.steps is None:
        args.minutes = 15.0
    if args.resume and not args.out.exists():
        raise CapscopeError(f"--resume: no checkpoint at {args.out}")
    config = ClipTrainConfig(
        out=args.out, minutes=args.minutes, steps=args.steps, seed=args.seed, device=args.device,
        resume=args.resume, batch_scenes=args.batch_scenes, lr=args.lr, threads=args.threads,
        checkpoint_minutes=args.checkpoint_minutes, probe_scenes=args.probe_scenes,
    )
    train_clip(config)
    return 0


def _info_config(args, **overrides):
    from capscope.train.infometic_setup import InfoTrainConfig

    values = dict(
        out=args.out, minutes=args.minutes, steps=args.steps, seed=args.seed, device=args.device,
        threads=args.threads, checkpoint_minutes=args.checkpoint_minutes, batch_size=args.batch_size,
        lr=7e-4 if args.lr is None else args.lr,
        intra_layers=args.intra_layers, inter_layers=args.inter_layers, demo_scenes=args.demo_scenes,
        probe_gold=args.probe_gold,
    )
    values.update(overrides)
    return InfoTrainConfig(**values)


def run_train_infometic(args) -> int:
    from capscope.train.infometic_setup import state_path
    from capscope.train.infometic_trainer import train_infometic

    if args.labels is not None or args.dataset is not None:
        return run_finetune(args)
    if args.init is not None:
        raise CapscopeError("--init fine-tunes: give the labels too (--labels FILE or --dataset NAME)")
    if args.minutes is None and args.steps is None:
        args.minutes = 15.0
    if args.clip is None and args.clip_model is None:
        raise CapscopeError("give --clip (a demo CLIP from `capscope train clip`) or --clip-model/--clip-pretrained")
    if args.clip is not None and not args.clip.is_file():
        raise CapscopeError(f"--clip: no checkpoint at {args.clip}")
    if args.data is not None and not args.data.is_file():
        raise CapscopeError(f"--data: no training file at {args.data}")
    if args.resume and not state_path(args.out).is_file():
        raise CapscopeError(f"--resume: no training state at {state_path(args.out)}")
    train_infometic(_info_config(args, clip=args.clip, clip_model=args.clip_model, clip_pretrained=args.clip_pretrained,
                                 data=args.data, resume=args.resume, half=args.half))
    return 0


def run_train_demo(args) -> int:
    from capscope.train.demo_model import train_demo

    train_demo(args)
    return 0


def scorer_for(args):
    """The Scorer `capscope evaluate` uses: given regions only (each item's own),
    the metric and models asked for. A demo CLIP (`--clip-model
    capscope-demo-clip`) is registered with open_clip from the config beside its
    checkpoint and fed crops in the style it was trained on."""
    from capscope.batch.command_scorer import build_scorer
    from capscope.metrics.config import ScorerConfig

    crop = None
    if args.clip_model == "capscope-demo-clip":
        from capscope.demo.clip_model import config_path_beside, register_demo_clip_config
        from capscope.metrics.encoder import CropStyle
        from capscope.train.infometic_setup import DEMO_CROP

        beside = config_path_beside(Path(args.clip_pretrained)) if args.clip_pretrained else None
        register_demo_clip_config(beside if beside is not None and beside.is_file() else None)
        crop = CropStyle(**DEMO_CROP)
    metrics = list(args.metric) if isinstance(args.metric, (list, tuple)) else [args.metric]
    config = ScorerConfig.from_args(args, metrics).replace(regions="given", clip_crop=crop)
    return build_scorer(config)


def run_evaluate(args) -> int:
    import json

    from capscope.bench.evaluate import evaluate_gold, format_figures, read_gold

    if args.benchmark is not None:
        return run_leaderboard(args)
    if not args.metric:
        raise CapscopeError("--gold: name the metric (--metric NAME)")
    if len(args.metric) > 1:
        raise CapscopeError(f"--gold evaluates one metric, not {len(args.metric)} (--benchmark takes several)")
    args.metric = args.metric[0]
    if not args.gold.is_file():
        raise CapscopeError(f"--gold: no file at {args.gold}")
    try:
        items = read_gold(args.gold)
    except ValueError as err:
        raise CapscopeError(str(err)) from None
    scorer = scorer_for(args)
    figures = evaluate_gold(scorer, args.metric, items, args.gold.parent, token_rule=args.token_rule,
                            beta=args.beta, batch_size=args.batch_size, progress=not args.json)
    print(json.dumps(figures) if args.json else format_figures(figures))
    return 0


def run_leaderboard(args) -> int:
    """`capscope evaluate --benchmark DIR`: the release checked before anything is loaded, then scored."""
    import json

    from capscope.bench.leaderboard import evaluate_release, format_leaderboard
    from capscope.bench.release_check import check_release
    from capscope.metrics.registry import SPECS, metric_names

    if args.draws < 0:
        raise CapscopeError("--draws must be 0 or more")
    metrics = list(dict.fromkeys(args.metric or [m for m in metric_names() if SPECS[m].kind != "global"]))
    unknown = [m for m in metrics if m not in SPECS]
    if unknown:
        raise CapscopeError(f"--metric: unknown {', '.join(unknown)} (known: {', '.join(metric_names())})")
    release = check_release(args.benchmark)
    args.metric = metrics
    scorer = scorer_for(args)
    board = evaluate_release(release, scorer, metrics, word_typing(scorer), token_rule=args.token_rule,
                             beta=args.beta, draws=args.draws, seed=args.seed, controls=not args.no_controls,
                             batch_size=args.batch_size, progress=not args.json)
    print(json.dumps(board) if args.json else format_leaderboard(board))
    return 0


def word_typing(scorer):
    """The leaderboard's word types: `capscope diagnose`'s (diagnose/error_types.py), with the
    scorer's spaCy pipeline."""
    from capscope.bench.leaderboard import WordTyping
    from capscope.diagnose.error_types import TYPES, caption_types, type_source

    nlp = scorer.nlp
    return WordTyping(lambda caption, tokens: caption_types(caption, tokens, nlp), type_source(nlp), TYPES)
