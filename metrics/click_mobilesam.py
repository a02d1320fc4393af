"""Click to segment with MobileSAM, built by ultralytics (the AGPL `yolo` extra)
and driven through its image encoder, prompt encoder and mask decoder."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from PIL import Image

from .click_protocol import MAX_CANDIDATES, Embedding, Point
from .click_weights import MOBILESAM_WEIGHTS
from .loading import ModelUnavailable, read_checkpoint


class MobileSamClickSegmenter:
    """MobileSAM as ultralytics builds it (`build_mobile_sam`), driven through its three
    public modules the way segment-anything's predictor drives SAM: the image's longest
    side scaled to 1024 and padded, the encoder run once per image; a click is the prompt
    encoder and the mask decoder on the kept features (a few milliseconds), the previous
    click's low-res logits fed back, the 256 x 256 logits scaled up to the image. The
    image's state is the Embedding itself: nothing is swapped in and out of a predictor,
    so clicks on several images need no lock."""

    fallback = False
    side = 1024

    def __init__(self, model=None, checkpoint=None, device: str = "cpu", random_weights: bool = False):
        from .segmenters import import_ultralytics

        import_ultralytics()
        from ultralytics.models.sam.build import build_mobile_sam

        if model is None:
            model = build_mobile_sam(None)
            if not random_weights:
                path = MOBILESAM_WEIGHTS.path(checkpoint)
                state = read_checkpoint(path, "MobileSAM", MOBILESAM_WEIGHTS.variable, weights_only=True)
                try:
                    model.load_state_dict(state.get("model", state), strict=True)
                except (RuntimeError, AttributeError) as err:
                    raise ModelUnavailable(f"MobileSAM: {path} does not fit MobileSAM: "
                                           f"{str(err).splitlines()[0]}") from None
        import torch

        self.model = model.to(device).eval()
        # channels-last convolutions: the image encoder took 1.46 s a picture on 2 CPU cores, 0.89-0.98 s so
        self.model.image_encoder.to(memory_format=torch.channels_last)
        self.device = device
        self.name = "MobileSAM" + (" (random weights)" if random_weights else "")

    @classmethod
    def with_random_weights(cls, device: str = "cpu") -> "MobileSamClickSegmenter":
        """The real architecture with untrained weights: for timing only (its masks mean nothing)."""
        return cls(device=device, random_weights=True)

    def embed(self, image: Image.Image) -> Embedding:
        import torch

        rgb = image.convert("RGB")
        scale = self.side / max(rgb.size)
        resized = (int(rgb.width * scale + 0.5), int(rgb.height * scale + 0.5))  # as SAM's ResizeLongestSide
        pixels = torch.from_numpy(np.asarray(rgb.resize(resized, Image.BILINEAR), dtype=np.float32)).permute(2, 0, 1)
        pixels = (pixels - self.model.pixel_mean.cpu().view(3, 1, 1)) / self.model.pixel_std.cpu().view(3, 1, 1)
        padded = torch.zeros(1, 3, self.side, self.side)
        padded[0, :, :resized[1], :resized[0]] = pixels
        with torch.inference_mode():
            features = self.model.image_encoder(padded.to(self.device, memory_format=torch.channels_last))
        return Embedding(rgb.width, rgb.height, {"features": features, "resized": resized})

    def predict(self, embedding: Embedding, points: Sequence[Point], box=None) -> tuple[np.ndarray, float]:
        return self.candidates(embedding, points, box)[0]

    def candidates(self, embedding: Embedding, points: Sequence[Point], box=None) -> list[tuple[np.ndarray, float]]:
        """Three masks for a lone first click (multimask output), one once earlier logits
        or several clicks pin the object down; best (predicted IoU) first."""
        import torch
        import torch.nn.functional as F

        rw, rh = embedding.state["resized"]
        sx, sy = rw / embedding.width, rh / embedding.height
        prompts = (tuple(map(tuple, points)), None if box is None else tuple(box))
        earlier = embedding.previous.get((prompts[0][:-1], prompts[1])) if points else None
        with torch.inference_mode():
            point_input = None
            if points:
                coords = torch.tensor([[[x * sx, y * sy] for x, y, _ in points]], dtype=torch.float32, device=self.device)
                labels = torch.tensor([[int(p) for _, _, p in points]], dtype=torch.int32, device=self.device)
                point_input = (coords, labels)
            box_input = None if box is None else torch.tensor(
                [[box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy]], dtype=torch.float32, device=self.device)
            sparse, dense = self.model.prompt_encoder(points=point_input, boxes=box_input, masks=earlier)
            low, iou = self.model.mask_decoder(
                image_embeddings=embedding.state["features"], image_pe=self.model.prompt_encoder.get_dense_pe(),
                sparse_prompt_embeddings=sparse, dense_prompt_embeddings=dense,
                multimask_output=earlier is None and len(points) <= 1)
            logits = F.interpolate(low, (self.side, self.side), mode="bilinear", align_corners=False)[..., :rh, :rw]
            logits = F.interpolate(logits, (embedding.height, embedding.width), mode="bilinear", align_corners=False)
            masks = (logits[0] > self.model.mask_threshold).cpu().numpy()
        scores = iou[0].float().cpu().numpy()
        order = [int(i) for i in np.argsort(-scores.astype(np.float64), kind="stable")][:MAX_CANDIDATES]
        embedding.previous = {prompts: low[:, order[0]:order[0] + 1]}
        return [(masks[i], float(scores[i])) for i in order]
