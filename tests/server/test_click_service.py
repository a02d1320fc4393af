"""The server's click service: an image's embedding computed once and kept for its clicks,
computed ahead only for users who click to segment, and the oldest dropped past the limit."""
from PIL import Image

from capscope.metrics.click_segmenters import ClassicClickSegmenter
from capscope.server.segmenting import KEPT_EMBEDDINGS, ClickService


class CountingSegmenter(ClassicClickSegmenter):
    def __init__(self):
        super().__init__()
        self.embedded = []

    def embed(self, image):
        self.embedded.append(image.size)
        return super().embed(image)


def images(folder, n):
    paths = []
    for i in range(n):
        paths.append(folder / f"{i}.png")
        Image.new("RGB", (20 + i, 16), (200, 30, 30)).save(paths[-1])
    return [str(p) for p in paths]


def test_embeddings_once_per_image_and_ahead_only_for_users_who_segment(tmp_path):
    segmenter = CountingSegmenter()
    service = ClickService(segmenter=segmenter)
    paths = images(tmp_path, KEPT_EMBEDDINGS + 2)
    service.prefetch("ann", 1, paths[0])  # ann has never clicked to segment: nothing is computed
    assert segmenter.embedded == []
    for _ in range(3):
        answer = service.segment(1, paths[0], [(5, 5, 1)], user="ann")
    assert segmenter.embedded == [(20, 16)] and answer["embedding_ms"] >= 0
    service.prefetch("ann", 2, paths[1])  # now she has: her next image is embedded ahead
    service.embedding(2, paths[1]).result()
    assert segmenter.embedded == [(20, 16), (21, 16)]
    for i, path in enumerate(paths[2:], start=3):
        service.segment(i, path, [(5, 5, 1)], user="ann")
    service.segment(1, paths[0], [(5, 5, 1)], user="ann")  # dropped past the limit: computed again
    assert len(segmenter.embedded) == len(paths) + 1
    service.close()
