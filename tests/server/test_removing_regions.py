"""Taking an added region away through the REST API (docs/formats.md §8.1): undo takes back the
region just added, its adder withdraws it while no one else has voted on it, an admin removes any
region with the votes on it; the region keeps its index, history and audit say who did it."""
import pytest

from annotation_support import TEAM, TEAM_ADMIN, small_team_client

(ANN, BOB), BOSS = TEAM, TEAM_ADMIN
SCRIPT = {"X-Requested-With": "script"}
BOX = [40, 20, 60, 44]


@pytest.fixture()
def team(tmp_path):
    store, client = small_team_client(tmp_path)
    client.item = client.get("/api/items/next", auth=ANN).json()["item_id"]
    assert client.get("/api/items/next", auth=BOB).json()["item_id"] == client.item
    yield client
    store.dispose()


def regions(client, who=ANN) -> list[dict]:
    return client.get(f"/api/items/{client.item}", auth=who).json()["regions"]


def add(client, who=ANN, box=BOX) -> int:
    answer = client.post(f"/api/items/{client.item}/regions", auth=who, json={"box": box})
    assert answer.status_code == 201, answer.text
    return answer.json()["index"]


def test_undo_right_after_adding_takes_the_region_back_and_it_can_be_added_again(team):
    index = add(team)
    assert team.get(f"/api/items/{team.item}", auth=ANN).json()["labels"]["can_undo"] is True
    undone = team.post(f"/api/items/{team.item}/undo", auth=ANN, headers=SCRIPT)
    assert undone.status_code == 200, undone.text
    gone = regions(team)[index]
    assert gone["removed"]["how"] == "undone" and gone["removed"]["by"] == "ann"
    assert regions(team, BOB)[index]["removed"] is not None  # gone for every annotator of the image
    assert [s["action"] for s in team.get(f"/api/items/{team.item}/history", auth=ANN).json()] == \
        ["start", "add region", "undo"]
    assert add(team) == index + 1  # the same box again is a new region: the taken-back one is no duplicate


def test_undo_after_labelling_the_added_region_first_takes_back_the_label_then_the_region(team):
    index = add(team)
    put = team.put(f"/api/items/{team.item}/labels", auth=ANN,
                   json={"incorrect_tokens": [], "mentioned_regions": [index], "status": "draft"})
    assert put.status_code == 200
    first = team.post(f"/api/items/{team.item}/undo", auth=ANN, headers=SCRIPT).json()
    assert first["mentioned_regions"] == [] and regions(team)[index]["removed"] is None
    team.post(f"/api/items/{team.item}/undo", auth=ANN, headers=SCRIPT)
    assert regions(team)[index]["removed"]["how"] == "undone"


def test_a_region_someone_else_labelled_stays_when_its_adder_undoes_or_withdraws(team):
    index = add(team)
    assert team.put(f"/api/items/{team.item}/labels", auth=BOB, json={
        "incorrect_tokens": [], "mentioned_regions": [index], "status": "submitted"}).status_code == 200
    refused = team.delete(f"/api/items/{team.item}/regions/{index}", auth=ANN, headers=SCRIPT)
    assert refused.status_code == 422 and "others have labelled" in refused.json()["detail"]
    team.post(f"/api/items/{team.item}/undo", auth=ANN, headers=SCRIPT)
    assert regions(team)[index]["removed"] is None
    assert team.get(f"/api/items/{team.item}", auth=BOB).json()["labels"]["mentioned_regions"] == [index]


def test_an_annotator_withdraws_only_their_own_region(team):
    index = add(team)
    assert team.delete(f"/api/items/{team.item}/regions/{index}", auth=BOB, headers=SCRIPT).status_code == 403
    assert team.delete(f"/api/items/{team.item}/regions/0", auth=ANN, headers=SCRIPT).status_code == 403
    withdrawn = team.delete(f"/api/items/{team.item}/regions/{index}", auth=ANN, headers=SCRIPT)
    assert withdrawn.json() == {"index": index, "how": "withdrawn", "judgements_changed": 0}
    again = team.delete(f"/api/items/{team.item}/regions/{index}", auth=ANN, headers=SCRIPT)
    assert again.status_code == 422 and "already" in again.json()["detail"]
    assert team.delete(f"/api/items/{team.item}/regions/99", auth=BOSS, headers=SCRIPT).status_code == 404
    assert team.delete(f"/api/items/{team.item}/regions/-1", auth=BOSS, headers=SCRIPT).status_code == 422


def test_an_admin_removes_a_region_its_votes_go_and_history_audit_and_gold_say_so(team):
    item = team.item
    for who, links in ((ANN, [[1, 0]]), (BOB, [])):
        assert team.put(f"/api/items/{item}/labels", auth=who, json={
            "incorrect_tokens": [1], "mentioned_regions": [0], "links": links,
            "status": "submitted"}).status_code == 200
    assert team.post("/api/gold/majority", auth=BOSS, headers=SCRIPT).status_code == 200
    assert team.get(f"/api/items/{item}/gold", auth=BOSS).json()["region_labels"][0] == "mentioned"
    removed = team.delete(f"/api/items/{item}/regions/0", auth=BOSS, headers=SCRIPT)
    assert removed.json() == {"index": 0, "how": "removed", "judgements_changed": 2}
    labels = team.get(f"/api/items/{item}", auth=ANN).json()["labels"]
    assert labels["mentioned_regions"] == [] and labels["links"] == [] and labels["incorrect_tokens"] == [1]
    step = team.get(f"/api/items/{item}/history", auth=ANN).json()[-1]
    assert (step["action"], step["by"], step["comment"]) == ("region removed", "boss", "region 0 removed")
    assert team.get(f"/api/items/{item}/gold", auth=BOSS).json()["region_labels"][0] is None
    assert len(team.get(f"/api/items/{item}/gold/history", auth=BOSS).json()) == 2
    events = team.get("/api/audit?action=region removed", auth=BOSS).json()["events"]
    assert events[0]["actor"] == "boss" and events[0]["details"]["judgements_changed"] == 2
    # nobody labels it again, and undo does not bring the votes back
    again = team.put(f"/api/items/{item}/labels", auth=BOB, json={
        "incorrect_tokens": [], "mentioned_regions": [0], "status": "submitted"})
    assert again.status_code == 422 and "taken away" in again.json()["detail"]
    assert team.post(f"/api/items/{item}/undo", auth=ANN, headers=SCRIPT).json()["mentioned_regions"] == []


def test_an_annotator_cannot_reach_a_region_of_an_item_not_given_to_them(team):
    other = team.get("/api/items/next", auth=BOSS).json()
    assert other is not None
    assert team.delete(f"/api/items/{other['item_id']}/regions/0", auth=ANN, headers=SCRIPT).status_code == 403
