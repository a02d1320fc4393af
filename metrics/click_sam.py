"""Click to segment with segment-anything's `SamPredictor` (SAM) and SAM 2.1's
`SAM2ImagePredictor`: one image embedding per image, swapped into the predictor
for each click."""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np
from PIL import Image

from .click_protocol import MAX_CANDIDATES, Embedding, Point
from .click_weights import SAM2_CONFIGS, SAM2_WEIGHTS, sam2_checkpoint
from .loading import ModelUnavailable, read_checkpoint


class _PromptablePredictor:
    """What SAM's and SAM 2's predictors share: an image embedding that is set
    once and swapped in for each click, and the previous click's low-res logits
    fed back as the next click's mask input (as their interactive demos do)."""

    fallback = False
    state_fields: tuple[str, ...] = ()  # the predictor's fields that hold one image's embedding
    set_flag = ""                       # and the one that says an image is set

    def __init__(self, predictor):
        self.predictor = predictor
        self.lock = threading.Lock()  # one predictor object, swapped state: one click at a time

    def embed(self, image: Image.Image) -> Embedding:
        rgb = np.asarray(image.convert("RGB"))
        with self.lock:
            self.predictor.set_image(rgb)
            state = self._saved_state()
        return Embedding(rgb.shape[1], rgb.shape[0], state)

    def _saved_state(self) -> tuple:
        return tuple(getattr(self.predictor, name) for name in self.state_fields)

    def _restore_state(self, state: tuple) -> None:
        for name, value in zip(self.state_fields, state):
            setattr(self.predictor, name, value)
        setattr(self.predictor, self.set_flag, True)

    def predict(self, embedding: Embedding, points: Sequence[Point], box=None) -> tuple[np.ndarray, float]:
        return self.candidates(embedding, points, box)[0]

    def candidates(self, embedding: Embedding, points: Sequence[Point], box=None) -> list[tuple[np.ndarray, float]]:
        """The predictor's masks, best (highest predicted IoU) first: three for a first click
        alone (multimask output, the click being ambiguous), one once earlier logits or
        several clicks pin the object down."""
        coords = np.array([[x, y] for x, y, _ in points], dtype=np.float32) if points else None
        labels = np.array([int(p) for _, _, p in points], dtype=np.int32) if points else None
        prompts = (tuple(map(tuple, points)), None if box is None else tuple(box))
        earlier = embedding.previous.get((prompts[0][:-1], prompts[1])) if points else None
        with self.lock:
            self._restore_state(embedding.state)
            masks, scores, logits = self.predictor.predict(
                point_coords=coords, point_labels=labels, box=None if box is None else np.asarray(box, np.float32),
                mask_input=earlier, multimask_output=earlier is None and len(points) <= 1)
        order = [int(i) for i in np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")][:MAX_CANDIDATES]
        best = order[0]
        embedding.previous = {prompts: logits[best:best + 1]}
        return [(np.asarray(masks[i], dtype=bool), float(scores[i])) for i in order]


class SamClickSegmenter(_PromptablePredictor):
    state_fields, set_flag = ("features", "original_size", "input_size"), "is_image_set"
    def __init__(self, model=None, kind: str = "vit_b", checkpoint=None, device: str = "cpu"):
        from segment_anything import SamPredictor, sam_model_registry

        from .segmenters import load_sam

        if model is None:
            model, kind = load_sam(kind, checkpoint, device)
        self.name = f"SAM {kind}"
        super().__init__(SamPredictor(model.to(device).eval()))
        self._registry = sam_model_registry

    @classmethod
    def with_random_weights(cls, kind: str = "vit_b", device: str = "cpu") -> "SamClickSegmenter":
        """The real architecture with untrained weights: for timing only (its masks mean nothing)."""
        from segment_anything import sam_model_registry

        segmenter = cls(sam_model_registry[kind](checkpoint=None), kind, device=device)
        segmenter.name = f"SAM {kind} (random weights)"
        return segmenter


class Sam2ClickSegmenter(_PromptablePredictor):
    # SAM 2's predictor keeps an image's features in private fields and has no public way to
    # set them back: its public get_image_embedding() gives the lowest level only, and the
    # mask decoder also needs the high-resolution levels (`_features["high_res_feats"]`),
    # which only the model's private `_prepare_backbone_features` makes
    state_fields, set_flag = ("_features", "_orig_hw", "_is_batch"), "_is_image_set"
    def __init__(self, checkpoint=None, device: str = "cpu", random_weights: bool = False, size: str = "small"):
        try:
            from sam2.build_sam import build_sam2
            from sam2.sam2_image_predictor import SAM2ImagePredictor
        except ImportError:
            raise ModelUnavailable("SAM 2: the sam2 package is not installed (pip install 'capscope[sam2]')") from None
        if size not in SAM2_CONFIGS:
            raise ValueError(f"SAM 2 size {size!r}: choose from {', '.join(SAM2_CONFIGS)}")
        config, weights = SAM2_CONFIGS[size], SAM2_WEIGHTS[size]
        model = build_sam2(config, None, device=device, mode="eval")
        if not random_weights:
            path = sam2_checkpoint(checkpoint, size)
            state = read_checkpoint(path, weights.component, weights.variable, weights_only=True)
            try:
                model.load_state_dict(state.get("model", state), strict=True)
            except RuntimeError as err:
                raise ModelUnavailable(f"{weights.component}: {path} does not fit {config}: "
                                       f"{str(err).splitlines()[0]}") from None
        self.name = f"SAM 2.1 hiera-{size}" + (" (random weights)" if random_weights else "")
        super().__init__(SAM2ImagePredictor(model))
