"""Model suggestions for an item (Annotate's pre-labels, `GET /api/items/{id}?suggestions=true`):
the words the model calls wrong and the regions it calls mentioned, from the item's stored
predictions when it has them, else scored once with the server's scorer on the item's own
words and regions. Kept per item and per server model, so an activation makes every item look again."""
from __future__ import annotations

import functools
import logging

from PIL import Image

from capscope.annotation import added_regions, workflow
from capscope.annotation.captioners import stored_verdicts
from capscope.annotation.users import UserInfo
from capscope.common.lru import LRUCache
from capscope.db import Store
from capscope.metrics.images import read_image
from capscope.metrics.registry import metric_names
from capscope.server.scoring import Models

log = logging.getLogger(__name__)

SUGGESTIONS_KEPT = 2048  # items whose suggestions are kept in memory

Suggestion = tuple[set[int], set[int], str, str | None]  # wrong words, mentioned regions, metric, model version


@functools.lru_cache(maxsize=64)
def item_picture(path: str) -> Image.Image:
    """An item's image, decoded once for the suggestions and for Annotate's drawing (the last 64 kept)."""
    return read_image(path)


class Suggestions:
    """One server's suggestions, shared by the REST API and the web UI."""

    def __init__(self, store: Store, models: Models):
        self.store, self.models = store, models
        self._cache = LRUCache(SUGGESTIONS_KEPT)

    def _key(self, item_id: int) -> tuple[int, str | None]:
        return item_id, self.models.version

    def cached(self, item_id: int) -> Suggestion | None:
        key = self._key(item_id)
        return self._cache[key] if key in self._cache else None

    def get(self, user: UserInfo, item: dict, compute: bool = True) -> Suggestion | None:
        """(wrong words, mentioned regions, metric, model version or None for the server's default
        model): cached, else stored, else (with `compute`) scored now; None when there are none."""
        key = self._key(item["item_id"])
        if key in self._cache:
            return self._cache[key]
        found = self.stored(user, item) or (self._computed(user, item) if compute else None)
        if found is not None:
            self._cache[key] = found
        return found

    def view(self, user: UserInfo, item: dict) -> dict | None:
        """The suggestions as the REST API gives them (docs/formats.md §8)."""
        found = self.get(user, item)
        if found is None:
            return None
        wrong, mentioned, metric, version = found
        return {"incorrect_tokens": sorted(wrong), "mentioned_regions": sorted(mentioned), "metric": metric,
                "model_version": version}

    def stored(self, user: UserInfo, item: dict) -> Suggestion | None:
        """From the item's newest stored predictions (a token metric's), decided under the server's
        token rule at the scale the prediction was made with (a fine-tuned version's fitted one)."""
        full = workflow.get_item(self.store, user, item["item_id"], include_predictions=True)
        # newest first per metric (item_views.predictions_of): after an activation, the active version's
        stored = {p["metric"]: p for p in reversed(full.get("predictions") or []) if p.get("token_scores")}
        metric = next((m for m in metric_names(kind="token") if m in stored), None)
        if metric is None:
            return None
        prediction = stored[metric]
        return (*decided(item, prediction, metric, self.models.token_rule, prediction.get("word_scale") or 1.0),
                prediction.get("model_version"))

    def _computed(self, user: UserInfo, item: dict) -> Suggestion | None:
        try:
            image = item_picture(added_regions.item_image_file(self.store, user, item["item_id"]).path)
            regions = [{"box": r["box"], "mask": r.get("mask")} for r in item["regions"]]  # an added region's mask
            scorer, version = self.models.current()   # the scorer and its version tag as one pair
            row = self.models.score_on(scorer, image, item["caption"], regions=regions, tokens=item["tokens"],
                                       user=user.name)
        except Exception as err:  # noqa: BLE001  a missing model must not break annotation
            log.warning("suggestions unavailable for item %s: %s", item["item_id"], err)
            return None
        metric = next((m for m in metric_names(kind="token") if m in row["metrics"]), None)
        return None if metric is None else (*_chosen(row["metrics"][metric]), metric, version)


def decided(item: dict, stored: dict, metric: str, token_rule: str, word_scale: float) -> tuple[set, set, str]:
    """A stored prediction to (wrong words, mentioned regions, metric), decided as the server's
    scorer decides: the InfoMetIC family under the server's token rule (and the version's word
    threshold scale), other metrics at their own threshold."""
    result = stored_verdicts(metric, stored["token_scores"], stored.get("region_scores"), item["tokens"], token_rule,
                             word_scale)
    return (*_chosen(result), metric)


def _chosen(result: dict) -> tuple[set[int], set[int]]:
    """(wrong words, mentioned regions) of a metric's verdicts."""
    return ({i for i, c in enumerate(result.get("token_correct") or []) if c is False},
            {i for i, m in enumerate(result.get("region_mentioned") or []) if m})
