"""The Label Studio labeling config capscope's tasks fit, and the names its
results use (control, object and label names), shared by the export and the import."""
from __future__ import annotations

WORDS, REGIONS, MASKS = "words", "regions", "masks"       # the config's control names
CAPTION, IMAGE = "caption", "image"                      # its object names
WRONG, MENTIONED, LEFT_OUT = "wrong", "mentioned", "left out"
TIED, JUNK, SPEAKS_OF = "tied", "no object", "speaks of"  # a word tied to a region; a region that is no object


def labeling_config() -> str:
    """The Label Studio labeling config that capscope's tasks fit."""
    return f"""<View>
  <Header value="Click the words that are wrong; label the regions the caption mentions"/>
  <Text name="{CAPTION}" value="$caption" granularity="word"/>
  <Labels name="{WORDS}" toName="{CAPTION}" choice="single">
    <Label value="{WRONG}" background="#e53935"/>
    <Label value="{TIED}" background="#1e88e5"/>
  </Labels>
  <Image name="{IMAGE}" value="$image" zoom="true"/>
  <RectangleLabels name="{REGIONS}" toName="{IMAGE}" choice="single">
    <Label value="{MENTIONED}" background="#43a047"/>
    <Label value="{LEFT_OUT}" background="#9e9e9e"/>
    <Label value="{JUNK}" background="#424242"/>
  </RectangleLabels>
  <BrushLabels name="{MASKS}" toName="{IMAGE}" choice="single">
    <Label value="{MENTIONED}" background="#43a047"/>
    <Label value="{LEFT_OUT}" background="#9e9e9e"/>
  </BrushLabels>
  <Relations>
    <Relation value="{SPEAKS_OF}"/>
  </Relations>
</View>
"""
