"""the dataset each user annotates (Annotate's picker)

Revision ID: 0010
Revises: 0009
Create Date: tenth release
"""
from alembic import op
import sqlalchemy as sa


revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # NULL: every dataset, the demo dataset last (what a user had before choosing)
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('annotate_dataset', sa.String(length=200), nullable=True))


def downgrade() -> None:
    op.execute('ALTER TABLE users DROP COLUMN annotate_dataset')
