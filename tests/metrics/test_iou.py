"""One IoU for masks and boxes (metrics/regions.py), by hand."""
import numpy as np
import pytest

from capscope.metrics.regions import box_mask, iou


def test_boxes_by_hand():
    assert iou([0, 0, 2, 2], [1, 1, 3, 3]) == pytest.approx(1 / 7)    # 1 shared of 4 + 4 - 1
    assert iou([0, 0, 2, 2], [2, 0, 4, 2]) == 0.0                     # touching edges share nothing
    assert iou((0.0, 0.0, 10.0, 5.0), np.array([0.0, 0.0, 10.0, 5.0])) == 1.0
    assert iou([3, 3, 3, 3], [3, 3, 3, 3]) == 0.0                     # empty boxes: no union


def test_masks_by_hand_and_a_box_drawn_as_a_mask_agrees_with_the_box():
    a, b = np.zeros((4, 4), bool), np.zeros((4, 4), bool)
    a[0, :3], b[0, 1:] = True, True
    assert iou(a, b) == pytest.approx(2 / 4)
    assert iou(np.zeros((4, 4), bool), np.zeros((4, 4), bool)) == 0.0
    assert iou(np.ones((2, 2), np.uint8), np.ones((2, 2), np.uint8)) == 1.0  # 0/1 arrays are masks too
    boxes = ([2, 2, 10, 8], [5, 4, 14, 12])
    assert iou(*(box_mask(b, 16, 16) for b in boxes)) == pytest.approx(iou(*boxes))
