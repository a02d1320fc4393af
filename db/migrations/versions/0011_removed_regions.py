"""regions removed (kept, marked) and the add-region step in an annotator's undo history

Revision ID: 0011
Revises: 0010
Create Date: eleventh release
"""
from alembic import op
import sqlalchemy as sa


revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a removed region keeps its row and its index (labels refer to regions by index)
    # (plain ADD COLUMN: no batch table rebuild on SQLite)
    op.add_column('regions', sa.Column('removed_at', sa.DateTime(), nullable=True))
    op.add_column('regions', sa.Column('removed_by', sa.String(length=100), nullable=True))
    op.add_column('regions', sa.Column('removed_how', sa.String(length=20), nullable=True))
    op.add_column('label_revisions', sa.Column('region', sa.Integer(), nullable=True))


def downgrade() -> None:
    op.execute('ALTER TABLE label_revisions DROP COLUMN region')
    for column in ('removed_how', 'removed_by', 'removed_at'):
        op.execute(f'ALTER TABLE regions DROP COLUMN {column}')
