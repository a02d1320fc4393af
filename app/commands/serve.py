"""`capscope serve`: the REST API and the web UI on one port."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from capscope.commands.options import add_db_option, open_store
from capscope.metrics.config import add_flags
from capscope.metrics.constants import CLICK_SEGMENTERS
from capscope.common.errors import CapscopeError


def register(sub) -> None:
    serve = sub.add_parser("serve", help="start the web UI and REST API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=7860)
    serve.add_argument("--lease-minutes", type=float, default=30.0, help="an unsaved item returns to the queue after this")
    # the server's one scorer: the rest of its options are the defaults (every metric whose weights load)
    add_flags(serve, ["token_rule", "precision"])
    serve.add_argument("--data-root", action="append", type=Path, dest="data_roots", metavar="DIR",
                       help="a folder whose files admins may name to the server (Benchmark's judgement files and "
                            "their images, Compare's scored files, /api/diagnose folders); repeatable; default: the "
                            "data folder")
    serve.add_argument("--rescore-limit", type=int, default=None, metavar="N",
                       help="after a model version is activated, its dataset's first N queued items are scored "
                            "again with it (default 500; 0: every queued item)")
    serve.add_argument("--session-hours", type=float, default=None, metavar="H",
                       help="a web UI sign-in lasts this long (default: $CAPSCOPE_SESSION_HOURS, else 12)")
    serve.add_argument("--cors-origin", action="append", default=[], dest="cors_origins", metavar="ORIGIN",
                       help="another site whose pages may call this server with its users' credentials "
                            "(e.g. https://labels.example.org); repeatable; default none")
    serve.add_argument("--trusted-proxy", action="append", default=[], dest="trusted_proxies", metavar="ADDRESS",
                       help="a reverse proxy (an address or a network, e.g. 10.0.0.5 or 10.0.0.0/24) whose "
                            "X-Forwarded-For and X-Forwarded-Proto are believed, so that sign-in back-off and the "
                            "audit log see each client's own address; repeatable; default none (no header believed)")
    serve.add_argument("--score-waiting", type=int, default=8, metavar="N",
                       help="scorings a user may have waiting or running at once; more are refused (REST: 429) "
                            "(default 8; a user with several pages open types in each)")
    serve.add_argument("--score-timeout", type=float, default=60.0, metavar="S",
                       help="a scoring that waits this long for the scorer is refused (REST: 503) (default 60)")
    serve.add_argument("--segmenter", choices=CLICK_SEGMENTERS, default="auto",
                       help="click to segment in Annotate and POST /api/items/{id}/segment: SAM ViT-B, SAM 2.1 "
                            "small or hiera-tiny (sam2-tiny; the sam2 extra), MobileSAM (the yolo extra, AGPL), or "
                            "the classic random walker (a labelled fallback); weights are fetched on first use; auto: "
                            "the best of sam2, sam2-tiny, sam, mobilesam whose weights are here, else the fallback, "
                            "never a download (default auto)")
    add_db_option(serve)
    serve.set_defaults(func=run_serve)


def run_serve(args) -> int:
    import uvicorn

    from capscope.metrics.config import ScorerConfig
    from capscope.server.api import create_app
    from capscope.server.scoring import SERVER_CONFIG
    from capscope.metrics.loading import resolve_device
    from capscope.server.data_roots import check_folders
    from capscope.server.segmenting import ClickService
    from capscope.server.training import RESCORE_LIMIT

    roots = check_folders(args.data_roots)
    if args.segmenter == "auto":
        from capscope.metrics.click_segmenters import auto_choice

        print(f"click segmenter: auto picks {auto_choice()} (the best whose weights are here; auto never downloads)",
              file=sys.stderr)
    if args.rescore_limit is not None and args.rescore_limit < 0:
        raise CapscopeError(f"--rescore-limit must be 0 (every queued item) or more, not {args.rescore_limit}")
    if args.session_hours is not None and not args.session_hours > 0:
        raise CapscopeError(f"--session-hours must be more than 0, not {args.session_hours}")
    rescore_limit = RESCORE_LIMIT if args.rescore_limit is None else (args.rescore_limit or None)
    app = create_app(store=open_store(args), lease_seconds=max(1, int(args.lease_minutes * 60)),
                     scorer_config=ScorerConfig.from_args(args, base=SERVER_CONFIG), data_roots=roots,
                     rescore_limit=rescore_limit, cors_origins=check_origins(args.cors_origins),
                     score_gate=score_gate(args.score_waiting, args.score_timeout),
                     click_service=ClickService(args.segmenter, str(resolve_device(getattr(args, "device", "auto")))),
                     first_run=not os.environ.get("CAPSCOPE_NO_SEED"))
    try:  # the Gradio UI (its own issue) mounts itself at / on the same app
        from capscope.ui.page import mount_ui
    except ModuleNotFoundError as err:
        if err.name != "capscope.ui.page":
            raise
    else:
        app = mount_ui(app, seed=False, session_hours=args.session_hours) or app  # the server made its first run
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning" if not args.verbose else "info",
                **proxy_options(args.trusted_proxies))
    return 0


def proxy_options(trusted: list[str]) -> dict:
    """uvicorn's forwarded-header options for `--trusted-proxy` values: the headers
    are believed from those addresses only, and from none when none is given
    (uvicorn's own default believes 127.0.0.1)."""
    import ipaddress

    for value in trusted:
        try:
            ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise CapscopeError(f"--trusted-proxy takes an IP address or network, not {value!r}") from None
    if not trusted:
        return {"proxy_headers": False}
    return {"proxy_headers": True, "forwarded_allow_ips": ",".join(trusted)}


def check_origins(origins: list[str]) -> tuple[str, ...]:
    """`--cors-origin` values: each a scheme and host (and port), nothing else."""
    from urllib.parse import urlsplit

    for origin in origins:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") or parts.query:
            raise CapscopeError(f"--cors-origin {origin}: give a scheme and host, e.g. https://labels.example.org")
    return tuple(origin.rstrip("/") for origin in origins)


def score_gate(waiting: int, timeout: float):
    from capscope.server.scoring import ScoreGate

    if waiting < 1 or not timeout > 0:
        raise CapscopeError("--score-waiting must be at least 1 and --score-timeout more than 0")
    return ScoreGate(per_user=waiting, wait_s=timeout)
