"""Label Studio, both ways (docs/formats.md §13): a dataset's items as tasks
Label Studio imports as they are (the image, the caption, the model's
suggestions as predictions, with an option the team's labels as annotations),
the labeling config that matches them, and Label Studio's JSON export read back
as one capscope annotator per Label Studio user.

Words are `labels` spans on the caption at character offsets; regions are
`rectanglelabels` boxes in percent of the image; a region's mask is a
`brushlabels` result in Label Studio's own RLE (`brush_rle`). A word tied to
a region is a `relation` result from its span to the region's box; a junk
region is a box labelled "no object"; a "mentioned" box or stroke drawn over
no stored region comes back as a region the annotator added.

The package: `labeling` (the config and its names), `exporting` (`tasks`),
`brushes` (`brush_rle`, `brush_mask`), `importing` (`read_export`,
`import_export`, `import_export_rows`, `user_emails`); every public name is
here too, as before the split."""
from __future__ import annotations

from capscope.annotation.label_studio.brushes import RLE_SIZES, brush_mask, brush_rle
from capscope.annotation.label_studio.exporting import CHUNK, image_url, tasks, version_label
from capscope.annotation.label_studio.importing import (ADDED_SOURCE, MATCH_IOU, Judged, LabelStudioReport,
                                                        import_export, import_export_rows, read_export,
                                                        user_emails)
from capscope.annotation.label_studio.labeling import (CAPTION, IMAGE, JUNK, LEFT_OUT, MASKS, MENTIONED, REGIONS,
                                                       SPEAKS_OF, TIED, WORDS, WRONG, labeling_config)

__all__ = ["ADDED_SOURCE", "CAPTION", "CHUNK", "IMAGE", "JUNK", "Judged", "LEFT_OUT", "LabelStudioReport", "MASKS",
           "MATCH_IOU", "MENTIONED", "REGIONS", "RLE_SIZES", "SPEAKS_OF", "TIED", "WORDS", "WRONG", "brush_mask",
           "brush_rle", "image_url", "import_export", "import_export_rows", "labeling_config", "read_export",
           "tasks", "user_emails", "version_label"]
