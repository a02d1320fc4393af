"""predictions record the word threshold scale their words are decided at

Revision ID: 0005
Revises: 0004
Create Date: fifth release
"""
import re

from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

VERSION_TAG = re.compile(r"v(\d+):[0-9a-f]{1,64}")  # a fine-tuned version's predictions: "v{id}:{sha256[:12]}"


def upgrade() -> None:
    with op.batch_alter_table('predictions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('word_scale', sa.Float(), nullable=True))
    # until now a fine-tuned version's InfoMetIC predictions were decided at the
    # scale in its figures, looked up by their tag; the rows now say it themselves
    bind = op.get_bind()
    versions = sa.table('model_versions', sa.column('id', sa.Integer), sa.column('figures', sa.JSON))
    predictions = sa.table('predictions', sa.column('metric', sa.String), sa.column('model_version', sa.String),
                           sa.column('word_scale', sa.Float))
    scales = {vid: (figures or {}).get('word_threshold', {}).get('scale')
              for vid, figures in bind.execute(sa.select(versions.c.id, versions.c.figures))}
    tags = bind.execute(sa.select(predictions.c.model_version).distinct()
                        .where(predictions.c.metric == 'infometic')).scalars()
    for tag in list(tags):
        found = VERSION_TAG.fullmatch(tag)
        scale = scales.get(int(found.group(1))) if found else None
        if scale is not None and float(scale) != 1.0:
            bind.execute(predictions.update().where(predictions.c.metric == 'infometic',
                                                    predictions.c.model_version == tag)
                         .values(word_scale=float(scale)))


def downgrade() -> None:
    with op.batch_alter_table('predictions', schema=None) as batch_op:
        batch_op.drop_column('word_scale')
