"""metrics.preprocess gives open_clip's preprocessing bit for bit (issue 59):
every size, mode and pass layout the encoder meets, the CPU batches and the
GPU's table, and transforms it does not know run as themselves."""
import numpy as np
import open_clip
import pytest
import torch
from PIL import Image
from torchvision import transforms as T

from capscope.metrics.preprocess import Pixels, leaves_alone, split

RNG = np.random.default_rng(59)


def noise(width, height, mode="RGB"):
    image = Image.fromarray(RNG.integers(0, 256, (height, width, 3), dtype=np.uint8))
    return image if mode == "RGB" else image.convert(mode)


def reference(preprocess, images, rows):
    """What ClipBackbone.encode_images stacked before: the transform, image by image."""
    tensors = [preprocess(im.convert("RGB")) for im in images]
    return torch.stack(tensors + [tensors[0]] * (rows - len(tensors)))


IMAGES = [
    noise(224, 224), noise(640, 480), noise(480, 640), noise(301, 199), noise(17, 90), noise(224, 300),
    noise(224, 224, "L"), noise(250, 250, "RGBA"), noise(120, 80, "P"), noise(99, 230, "CMYK"), noise(1, 1),
]


@pytest.mark.parametrize("side", [224, 64])
def test_open_clip_transform_bit_for_bit(side):
    preprocess = open_clip.image_transform(side, is_train=False)
    pixels = Pixels(preprocess)
    assert pixels.fast
    for rows in (1, 4, 8, len(IMAGES)):
        for start in range(0, len(IMAGES), rows):
            chunk = IMAGES[start : start + rows]
            assert torch.equal(pixels.batch(chunk, rows), reference(preprocess, chunk, rows))


def test_passes_cover_every_image_in_order():
    preprocess = open_clip.image_transform(224, is_train=False)
    pixels = Pixels(preprocess)
    got = [(batch.clone(), n) for batch, n in pixels.passes(IMAGES, 4)]
    assert [n for _, n in got] == [4, 4, 3]
    for k, (batch, _) in enumerate(got):
        chunk = IMAGES[4 * k : 4 * k + 4]
        assert torch.equal(batch, reference(preprocess, chunk, 4))
    assert list(pixels.passes([], 4)) == []


def test_one_worker_and_threads_agree():
    preprocess = open_clip.image_transform(224, is_train=False)
    assert torch.equal(Pixels(preprocess, workers=1).batch(IMAGES), Pixels(preprocess, workers=4).batch(IMAGES))


def test_gpu_table_is_the_transform_of_every_byte():
    preprocess = open_clip.image_transform(224, is_train=False)
    pixels = Pixels(preprocess)
    table = pixels._table(torch.device("cpu"))
    values = torch.arange(256, dtype=torch.uint8)
    for c, (mean, std) in enumerate(zip(preprocess.transforms[-1].mean, preprocess.transforms[-1].std)):
        expected = values.to(torch.float32).div(255).sub(torch.tensor(mean)).div(torch.tensor(std))
        assert torch.equal(table[c], expected)
    # the table's lookup, as the GPU does it, gives the CPU's batch
    image = IMAGES[1]
    ids = torch.from_numpy(np.array(pixels._pil(image))).permute(2, 0, 1).long()
    ids += torch.arange(3).view(3, 1, 1) * 256
    assert torch.equal(table.flatten()[ids], reference(preprocess, [image], 1)[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
def test_gpu_batches_equal_the_cpu_transform():
    preprocess = open_clip.image_transform(224, is_train=False)
    pixels = Pixels(preprocess)
    for batch, n in pixels.passes(IMAGES, 4, "cuda"):
        assert batch.device.type == "cuda"
    got = pixels.batch(IMAGES, device="cuda").cpu()
    assert torch.equal(got, reference(preprocess, IMAGES, len(IMAGES)))


def test_unknown_transforms_run_as_themselves():
    odd = T.Compose([T.Resize(32), T.CenterCrop(32), T.ToTensor(), T.Lambda(lambda x: x * 2)])
    grey = T.Compose([T.Grayscale(3), T.ToTensor()])
    for preprocess in (odd, grey, lambda im: T.functional.to_tensor(im.resize((8, 8)))):
        pixels = Pixels(preprocess)
        assert not pixels.fast
        same_size = [IMAGES[0], IMAGES[6]]  # 224 x 224, RGB and L (greying keeps sizes)
        assert torch.equal(pixels.batch(same_size, 4), reference(preprocess, same_size, 4))


def test_no_normalize_and_uneven_sizes():
    plain = T.Compose([T.Resize(40), T.ToTensor()])  # no crop: sizes follow the images'
    pixels = Pixels(plain)
    assert pixels.fast and split(plain)[2] is None
    same = [noise(80, 80), noise(120, 120, "L")]
    assert torch.equal(pixels.batch(same, 3), reference(plain, same, 3))
    with pytest.raises(RuntimeError):  # torch.stack refuses different sizes, as it did before
        pixels.batch([noise(80, 80), noise(80, 120)])


def test_left_out_stages_are_the_ones_that_copy():
    resize, crop = T.Resize(224, interpolation=T.InterpolationMode.BICUBIC), T.CenterCrop(224)
    same, other = noise(224, 224), noise(300, 300)
    assert leaves_alone(crop, same) and not leaves_alone(crop, other)
    assert not leaves_alone(resize, same) and not leaves_alone(resize, other)  # runs: costs nothing at its size
    assert np.array_equal(np.asarray(crop(same)), np.asarray(same))
    assert resize(same) is same
