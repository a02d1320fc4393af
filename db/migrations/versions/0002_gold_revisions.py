"""gold revisions: every gold label set kept, oldest first

Revision ID: 0002
Revises: 0001
Create Date: second release
"""
from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('gold_revisions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('caption_id', sa.Integer(), nullable=False),
    sa.Column('revision', sa.Integer(), nullable=False),
    sa.Column('token_labels', sa.JSON(), nullable=False),
    sa.Column('region_labels', sa.JSON(), nullable=False),
    sa.Column('source', sa.String(length=20), nullable=False),
    sa.Column('adjudicator_id', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['adjudicator_id'], ['users.id'], name=op.f('fk_gold_revisions_adjudicator_id_users'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['caption_id'], ['captions.id'], name=op.f('fk_gold_revisions_caption_id_captions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gold_revisions')),
    sa.UniqueConstraint('caption_id', 'revision', name=op.f('uq_gold_revisions_caption_id_revision'))
    )
    op.create_index(op.f('ix_gold_revisions_caption_id'), 'gold_revisions', ['caption_id'], unique=False)
    # the gold labels already there become each caption's first revision
    op.execute(
        "INSERT INTO gold_revisions (caption_id, revision, token_labels, region_labels, source, adjudicator_id, created_at) "
        "SELECT caption_id, 1, token_labels, region_labels, source, adjudicator_id, updated_at FROM gold_labels"
    )


def downgrade() -> None:
    op.drop_index(op.f('ix_gold_revisions_caption_id'), table_name='gold_revisions')
    op.drop_table('gold_revisions')
