"""The review stage over REST (docs/formats.md §11): admins turn review on per
dataset; reviewers (and admins) take the pending judgements one by one and
accept, correct or send back each (annotation/review.py). An annotator's
returned judgement comes back to them through `GET /api/items/next`, with the
comment in the item's `review`; `GET /api/review/returned` lists them.

No `from __future__ import annotations` here: the routes' dependencies are local
names, which FastAPI must see as objects, not strings."""

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from pydantic import BaseModel, Field, StrictBool, StrictInt

from capscope.annotation import review
from capscope.annotation.users import UserInfo

MAX_INDICES = 10_000
JudgementId = Annotated[int, Path(ge=1, le=2**62)]


class ReviewSwitch(BaseModel):
    review: StrictBool


class DecisionRequest(BaseModel):
    decision: Literal["accept", "correct", "return"]
    comment: str | None = Field(default=None, max_length=review.MAX_COMMENT_CHARS,
                                description="required to return; optional otherwise")
    incorrect_tokens: list[StrictInt] | None = Field(default=None, max_length=MAX_INDICES,
                                                     description="correct: the corrected incorrect words")
    mentioned_regions: list[StrictInt] | None = Field(default=None, max_length=MAX_INDICES)
    junk_regions: list[StrictInt] | None = Field(default=None, max_length=MAX_INDICES)
    links: list[tuple[StrictInt, StrictInt]] | None = Field(default=None, max_length=MAX_INDICES)


def review_router(current_user, admin_user) -> APIRouter:
    """The routes; `current_user` and `admin_user`: the API's sign-in dependencies."""
    router = APIRouter()

    def reviewer_user(user: UserInfo = Depends(current_user)) -> UserInfo:
        if not review.may_review(user):
            raise HTTPException(403, "this call needs the reviewer or admin role")
        return user

    Reviewer = Annotated[UserInfo, Depends(reviewer_user)]
    Admin = Annotated[UserInfo, Depends(admin_user)]
    Anyone = Annotated[UserInfo, Depends(current_user)]

    @router.put("/api/datasets/{name}/review")
    def put_review(name: Annotated[str, Path(max_length=200)], body: ReviewSwitch, user: Admin,
                   store=Depends(_store)) -> dict:
        """Turn review on or off for the dataset: {"dataset", "review"}."""
        return review.set_review(store, user, name, body.review)

    @router.get("/api/review/datasets")
    def review_datasets(user: Reviewer, store=Depends(_store)) -> list[dict]:
        """Every dataset: [{"dataset", "review", "pending", "returned"}]."""
        return review.review_settings(store)

    @router.get("/api/review/next", responses={204: {"description": "no judgement waits for this reviewer"}})
    def next_judgement(user: Reviewer, store=Depends(_store), dataset: str | None = Query(None, max_length=200),
                       after: int | None = Query(None, ge=1, le=2**62)):
        """The pending judgement submitted first (in `dataset`, else any with review on), never the
        reviewer's own; with `after`, the first one after that judgement."""
        found = review.next_for_review(store, user, dataset, after)
        return Response(status_code=204) if found is None else found

    @router.get("/api/review/returned")
    def returned(user: Anyone, store=Depends(_store)) -> list[dict]:
        """The caller's judgements a reviewer sent back, to be submitted again."""
        return review.returned_to(store, user)

    @router.get("/api/review/{assignment_id}")
    def get_judgement(assignment_id: JudgementId, user: Reviewer, store=Depends(_store)) -> dict:
        """One judgement as a reviewer sees it: the item, the annotator's labels, its review state and history."""
        return review.get_review(store, user, assignment_id)

    @router.post("/api/review/{assignment_id}")
    def decide(assignment_id: JudgementId, body: DecisionRequest, user: Reviewer, request: Request,
               store=Depends(_store)) -> dict:
        """Accept, correct (the corrected parts of the labels) or return (with a comment) a pending judgement."""
        return review.decide(store, user, assignment_id, body.decision, body.comment,
                             incorrect_tokens=body.incorrect_tokens, mentioned_regions=body.mentioned_regions,
                             junk_regions=body.junk_regions, links=body.links,
                             lease_seconds=request.app.state.lease_seconds)

    return router


def _store(request: Request):
    return request.app.state.store
