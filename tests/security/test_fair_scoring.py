"""One annotator flooding the scorer cannot starve another. On eb11b64, 47
parallel POST /api/score from one annotator took another's PUT /labels from
0.05 s to 2.6 s, and 20 queued Inspect scores from one took another's from
0.17 s to 10 s: the scorer was one lock in arrival order and Gradio's model
queue one slot in arrival order, with no cap on either."""
from __future__ import annotations

import base64
import json
import statistics
import subprocess
import sys
import threading
import time

import httpx
import pytest

from security_support import ANN, BOB, basic, file_data, fn_index, gradio_config, gradio_event, ui_login, uploaded
from capscope.server.scoring import ScoreGate, ScoringBusy, ScoringTimeout

FLOOD = 47


def scene_png(team) -> bytes:
    return next((team.data / "demo-data" / "images").glob("*.png")).read_bytes()


def score_body(png: bytes) -> dict:
    return {"image": base64.b64encode(png).decode(), "caption": "a small red circle and a large blue square."}


def timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


FLOOD_SCRIPT = """
import collections, json, sys, threading, time
import httpx
url, user, password, threads, seconds, body_file = sys.argv[1:7]
body = open(body_file, "rb").read()
codes, stop = collections.Counter(), time.monotonic() + float(seconds)
client = httpx.Client(base_url=url, auth=(user, password), timeout=120,
                      limits=httpx.Limits(max_connections=int(threads) + 5))
def loop():
    while time.monotonic() < stop:
        codes[client.post("/api/score", content=body, headers={"Content-Type": "application/json"}).status_code] += 1
workers = [threading.Thread(target=loop) for _ in range(int(threads))]
[w.start() for w in workers]
[w.join() for w in workers]
print(json.dumps(codes))
"""


class Flood:
    """`FLOOD` threads of one user in a process of their own (as another
    annotator's machine would be), each sending its next request as soon as
    the last is answered, for `seconds`."""

    def __init__(self, team, user, body: dict, seconds: float, folder):
        body_file = folder / "flood.json"
        body_file.write_text(json.dumps(body))
        self.command = [sys.executable, "-c", FLOOD_SCRIPT, team.url, *user, str(FLOOD), str(seconds), str(body_file)]

    def __enter__(self):
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, text=True)
        time.sleep(2.0)  # the flood is on
        return self

    def __exit__(self, *exc):
        out, _ = self.process.communicate(timeout=180)
        self.codes = {int(k): v for k, v in json.loads(out).items()}


@pytest.mark.slow
def test_a_rest_flood_leaves_the_others_their_saves_and_scores(team, tmp_path):
    png = scene_png(team)
    bob = httpx.Client(base_url=team.url, timeout=60, headers=basic(BOB))
    item = bob.get("/api/items/next").json()["item_id"]
    save = lambda i: bob.put(f"/api/items/{item}/labels", json={"incorrect_tokens": [i % 3], "status": "draft"})  # noqa: E731
    score = lambda: bob.post("/api/score", json=score_body(png))  # noqa: E731
    assert score().status_code == 200  # the model is loaded before anything is timed
    idle_score = statistics.median(timed(score) for _ in range(9))
    idle_saves = [timed(lambda: save(i)) for i in range(60)]

    with Flood(team, ANN, score_body(png), seconds=12, folder=tmp_path) as flood:
        busy_saves = [timed(lambda: save(i)) for i in range(60)]
        busy_scores = [timed(lambda: assert_ok(score())) for _ in range(9)]
    assert set(flood.codes) == {200, 429}, flood.codes
    report = (f"idle: score {idle_score * 1000:.0f} ms, save p95 {p95(idle_saves) * 1000:.0f} ms; flooded by "
              f"{FLOOD} threads: score median {statistics.median(busy_scores) * 1000:.0f} ms, save p95 "
              f"{p95(busy_saves) * 1000:.0f} ms; the flooder got {flood.codes[200]} answers and "
              f"{flood.codes[429]} refusals")
    print(report)
    # a save waiting behind the flood's scorings would take seconds; 2 cores shared with the flooding process
    # give 30-150 ms (100 ms was the bound until two runs here measured 118 and 144 ms on unchanged code)
    assert p95(busy_saves) < 0.250, report
    # the scorer is taken in turns, so bob waits for one of the flooder's scorings at most; but the flooding
    # process and the server's answers of 429 take the 2 cores' time too: 3.2x here, 4.0x on CI's machine
    # (58 ms against 14 ms idle), where eb11b64 gave 43x (see the closing note of issue 55)
    assert statistics.median(busy_scores) <= 5 * idle_score + 0.05, report


def assert_ok(answer):
    assert answer.status_code == 200, answer.text


UI_FLOOD_SCRIPT = """
import collections, json, secrets, sys, threading, time
import httpx
url, user, password, index, path, seconds = sys.argv[1:7]
client = httpx.Client(base_url=url, timeout=120, limits=httpx.Limits(max_connections=30))
client.post("/login", data={"username": user, "password": password})
image = {"path": path, "meta": {"_type": "gradio.FileData"}, "orig_name": "scene.png"}
counts, stop = collections.Counter(), time.monotonic() + float(seconds)
def event():
    answer = client.post("/gradio_api/run/predict", json={"fn_index": int(index), "session_hash": secrets.token_hex(8),
                         "data": [image, "a small red circle.", "", "infometic", None, None]})
    if answer.status_code != 200:
        return f"status {answer.status_code}"
    return "refused by the scorer" if "scorings waiting or running" in answer.text else "scored"
def loop():
    while time.monotonic() < stop:
        counts[event()] += 1
workers = [threading.Thread(target=loop) for _ in range(20)]
[w.start() for w in workers]
[w.join() for w in workers]
print(json.dumps(counts))
"""


@pytest.mark.slow
def test_a_flood_in_the_ui_leaves_the_others_their_scores(team):
    """One annotator keeps 20 Inspect scores in flight (from a process of their own, as the page sends
    them); another's Inspect score waits for one of them at most, and the flooder's scorings past the
    cap are refused."""
    bob = ui_login(team, BOB)
    index = fn_index(gradio_config(bob), "score_a")
    path = uploaded(bob, "scene.png", scene_png(team))
    event = lambda: gradio_event(bob, index, [file_data(path), "a small red circle.", "", "infometic", None, None])  # noqa: E731
    assert event()["success"]
    idle = statistics.median(timed(event) for _ in range(5))
    flooder = subprocess.Popen([sys.executable, "-c", UI_FLOOD_SCRIPT, team.url, *ANN, str(index), path, "12"],
                               stdout=subprocess.PIPE, text=True)
    time.sleep(3.0)
    busy = [timed(lambda: assert_success(event())) for _ in range(5)]
    counts = json.loads(flooder.communicate(timeout=180)[0])
    report = (f"idle Inspect score {idle * 1000:.0f} ms; with another keeping 20 in flight "
              f"{statistics.median(busy) * 1000:.0f} ms; the flooder: {counts}")
    print(report)
    assert counts.get("status 429", 0) > 0 and counts.get("scored", 0) > 0, report
    # the scorer is taken in turns, but the page's drawing and Gradio's encoding of each answer are not, and
    # on this 2-core machine the flooding process takes a core itself: 4.2x was measured (eb11b64: see the
    # closing note), so this bounds the harm rather than matching the REST API's 2x
    assert statistics.median(busy) <= 5 * idle + 0.05, report


def test_the_queue_takes_a_user_s_events_up_to_a_cap():
    """Events that wait in Gradio's queue (Annotate's saves, bulk scoring): a user's past the cap are
    refused at once, as a full queue refuses (503 with the reason), instead of filling it ahead of the others'."""
    import asyncio
    from types import SimpleNamespace

    from capscope.ui.queue_cap import cap_per_user

    async def push(body, request, username):
        queue.event_ids_to_events[f"e{len(queue.event_ids_to_events)}"] = SimpleNamespace(username=username)
        return True, "event", "success"

    queue = SimpleNamespace(event_ids_to_events={}, push=push)
    cap_per_user(SimpleNamespace(_queue=queue), per_user=3)
    pushed = [asyncio.run(queue.push(body=None, request=None, username=name)) for name in ["ann"] * 5 + ["bob"]]
    assert [state for _, _, state in pushed] == ["success"] * 3 + ["queue_full"] * 2 + ["success"]
    assert "you already have 3 events" in pushed[3][1]
    queue.event_ids_to_events.clear()  # ann's events ended
    assert asyncio.run(queue.push(body=None, request=None, username="ann"))[2] == "success"


def test_an_admin_page_loads_in_few_queued_events(tmp_path):
    """Each tab's page loads go as one event: an admin's page queued 17, one past the cap, and on a slow
    machine the last was refused and its tab stayed empty. A page load must leave most of the cap free."""
    from capscope.db import Store
    from capscope.server.scoring import Models
    from capscope.ui.page import build_ui
    from capscope.ui.queue_cap import PER_USER_EVENTS

    demo = build_ui(Store(f"sqlite:///{tmp_path / 'loads.db'}"), Models(token_rule="paper"))
    queued = [fn for fn in demo.fns.values() if fn.queue and any(event == "load" for _, event in fn.targets)]
    assert 0 < len(queued) <= PER_USER_EVENTS // 2, [fn.name for fn in queued]


def test_a_merged_load_hands_each_part_its_inputs_and_keeps_a_failure_to_itself():
    import gradio as gr

    from capscope.ui.queue_cap import merged_load

    a, b, c, d = (gr.Textbox(render=False) for _ in range(4))

    def broken(request):
        raise RuntimeError("no database")

    load, inputs, outputs = merged_load([(lambda x, y, request: (x + y, request), [a, b], [c, d]),
                                         (broken, None, c), (lambda: "plain", None, [d])])
    assert inputs == [a, b] and outputs == [c, d, c, d]
    values = load("1", "2", "the request")
    assert values[:2] == ("12", "the request") and values[3] == "plain"
    assert values[2] == gr.skip()
    alone, _, _ = merged_load([(lambda request: ["a", "list"], None, [c])])
    assert alone(None) == ["a", "list"]  # one output: its value bare, as Gradio takes it


def assert_success(message):
    assert message.get("success"), message


# ---------------------------------------------------------------- the gate itself

def test_the_gate_takes_users_in_turns():
    gate, order, started = ScoreGate(per_user=5, max_waiting=10, wait_s=10), [], threading.Event()

    def hold():
        with gate.turn("ann"):
            started.set()
            time.sleep(0.3)

    def call(user, label):
        with gate.turn(user):
            order.append(label)

    holder = threading.Thread(target=hold)
    holder.start()
    started.wait()
    threads = [threading.Thread(target=call, args=("ann", f"ann{i}")) for i in range(3)]
    threads.append(threading.Thread(target=call, args=("bob", "bob")))
    for thread in threads:
        thread.start()
        time.sleep(0.02)
    for thread in [holder, *threads]:
        thread.join()
    assert order[:2] == ["ann0", "bob"]  # bob came last but waits for one of ann's calls only
    assert order[2:] == ["ann1", "ann2"]


def test_the_gate_refuses_past_its_caps_and_times_out():
    gate, release = ScoreGate(per_user=2, max_waiting=2, wait_s=0.2), threading.Event()

    def hold():
        with gate.turn("ann"):
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.05)
    waiter = threading.Thread(target=lambda: pytest.raises(ScoringTimeout, _turn, gate, "ann"))
    waiter.start()
    time.sleep(0.05)
    with pytest.raises(ScoringBusy, match="2 scorings"):
        _turn(gate, "ann")  # ann: one running, one waiting
    with pytest.raises(ScoringTimeout):
        _turn(gate, "bob")  # waits 0.2 s behind ann's call
    waiter.join()
    release.set()
    holder.join()
    assert gate.waiting() == 0
    _turn(gate, "bob")  # free again


def _turn(gate, user):
    with gate.turn(user):
        pass
