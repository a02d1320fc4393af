"""What the Annotate tab does for one user, independent of Gradio (`Annotator`):
each step goes to `capscope.annotation.workflow` (or the server's click service
and suggestions) and answers what the store now holds."""
from __future__ import annotations

import threading

from capscope.annotation import added_regions, browse, workflow
from capscope.annotation.refusals import AnnotationError
from capscope.annotation.users import UserInfo, annotate_dataset, get_user
from capscope.db import Store
from capscope.server.scoring import Models
from capscope.server.segmenting import ClickService
from capscope.server.suggestions import Suggestions
from capscope.pictures import draw as ui_draw


class Annotator:
    """What the Annotate tab does for one user, independent of Gradio."""

    def __init__(self, store: Store, models: Models | None = None, lease_seconds: int = workflow.LEASE_SECONDS,
                 clicks: ClickService | None = None, suggestions: Suggestions | None = None):
        self.store = store
        self.lease = lease_seconds
        self.clicks = clicks or ClickService("auto")
        # the server's (app/server/suggestions.py, shared with the REST API); none without a model
        self.suggestions = suggestions or (Suggestions(store, models) if models is not None else None)
        self._locks: dict[int, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def lock_for(self, user: UserInfo) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(user.id, threading.Lock())

    def user(self, name: str | None) -> UserInfo:
        if not name:
            raise AnnotationError("not logged in")
        return get_user(self.store, name)

    def item(self, user: UserInfo, item_id: int) -> dict:
        item = workflow.get_item(self.store, user, item_id)
        item["_path"] = workflow.image_path(self.store, user, item["image_id"])
        return item

    def next(self, user: UserInfo) -> dict | None:
        """The next item of the dataset the user chose (every dataset, the demo last, when none)."""
        item = workflow.next_item(self.store, user, dataset=annotate_dataset(self.store, user),
                                  lease_seconds=self.lease)
        if item is not None:
            item["_path"] = workflow.image_path(self.store, user, item["image_id"])
            self.clicks.prefetch(user.name, item["image_id"], item["_path"], dataset=item["dataset"])
        return item

    def previous(self, user: UserInfo, item_id: int | None) -> dict | None:
        item = workflow.previous_item(self.store, user, item_id)
        if item is not None:
            item["_path"] = workflow.image_path(self.store, user, item["image_id"])
        return item

    def toggle_token(self, user: UserInfo, item_id: int, index: int) -> dict:
        return workflow.toggle_token(self.store, user, item_id, index, lease_seconds=self.lease)

    def toggle_region(self, user: UserInfo, item_id: int, index: int) -> dict:
        return workflow.toggle_region(self.store, user, item_id, index, lease_seconds=self.lease)

    def toggle_junk(self, user: UserInfo, item_id: int, index: int) -> dict:
        return workflow.toggle_junk(self.store, user, item_id, index, lease_seconds=self.lease)

    def toggle_link(self, user: UserInfo, item_id: int, token: int, region: int) -> dict:
        return workflow.toggle_link(self.store, user, item_id, token, region, lease_seconds=self.lease)

    def segment(self, user: UserInfo, item_id: int, points: list, box: list | None = None) -> dict:
        image = added_regions.item_image_file(self.store, user, item_id)
        return self.clicks.segment(image.id, image.path, points, box, user=user.name, size=image.size)

    def add_region(self, user: UserInfo, item_id: int, mask: dict, points: list,
                   box: list | None = None) -> tuple[dict, bool]:
        prompts = {"points": [list(p) for p in points], "box": None if box is None else list(box),
                   "segmenter": self.clicks.name}
        return added_regions.add_region(self.store, user, item_id, mask=mask, prompts=prompts)

    def region_at_click(self, user: UserInfo, item_id: int, point) -> int | None:
        item = self.item(user, item_id)
        return ui_draw.clicked_region(ui_draw.shown_boxes(item["regions"]), (item["width"], item["height"]), point)

    def undo(self, user: UserInfo, item_id: int) -> dict:
        return workflow.undo(self.store, user, item_id, lease_seconds=self.lease)

    def submit(self, user: UserInfo, item_id: int) -> dict:
        return workflow.submit(self.store, user, item_id, lease_seconds=self.lease)

    def skip(self, user: UserInfo, item_id: int) -> dict:
        """Give the item back; a submitted item (reached again through Previous) stays submitted."""
        labels = self.item(user, item_id).get("labels") or {}
        if labels.get("status") == "submitted":
            return labels
        return workflow.skip(self.store, user, item_id, lease_seconds=self.lease)

    def flag(self, user: UserInfo, item_id: int, kind: str, comment: str = "") -> dict:
        return workflow.add_flag(self.store, user, item_id, kind, comment)

    def progress(self, user: UserInfo) -> dict:
        return browse.progress(self.store, user)
