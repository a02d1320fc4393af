"""benchmark releases

Revision ID: 0009
Revises: 0008
Create Date: ninth release
"""
from alembic import op
import sqlalchemy as sa


revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'releases',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('dataset_id', sa.Integer(), nullable=False),
        sa.Column('version', sa.String(length=64), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('created_by', sa.String(length=200), nullable=True),
        sa.Column('method', sa.String(length=40), nullable=False),
        sa.Column('gold_revisions', sa.JSON(), nullable=False),
        sa.Column('rows_gz', sa.LargeBinary(), nullable=False),
        sa.Column('details', sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(['dataset_id'], ['datasets.id'], name=op.f('fk_releases_dataset_id_datasets'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_releases')),
        sa.UniqueConstraint('dataset_id', 'version', name=op.f('uq_releases_dataset_id_version')),
    )


def downgrade() -> None:
    op.drop_table('releases')
