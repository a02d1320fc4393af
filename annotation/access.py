"""Who may see an item: the one check every call that opens an item makes."""
from __future__ import annotations

from sqlalchemy import exists, select

from capscope.annotation.refusals import Forbidden, NotFound
from capscope.annotation.users import UserInfo
from capscope.db import Assignment, Caption, Image


def item_caption(session, user: UserInfo, item_id: int) -> Caption:
    """An item given to this user (admins: any item); NotFound, or Forbidden when it was not given to them."""
    caption = session.get(Caption, item_id)
    if caption is None:
        raise NotFound(f"no item {item_id}")
    if not user.is_admin and not session.scalar(select(exists().where(
            Assignment.caption_id == item_id, Assignment.user_id == user.id))):
        raise Forbidden(f"item {item_id} was not given to you")
    return caption


def item_image(session, user: UserInfo, item_id: int) -> Image:
    """The image of an item given to this user (admins: any item's)."""
    return item_caption(session, user, item_id).image
