"""regions annotators add, regions marked junk, words tied to regions

Revision ID: 0006
Revises: 0005
Create Date: sixth release
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # every existing region is a proposal (added_by NULL) and every existing revision has no junk
    # and no ties (NULL read as none): nothing stored changes meaning
    with op.batch_alter_table('regions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('added_by', sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column('created_at', sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column('prompts', sa.JSON(), nullable=True))
    with op.batch_alter_table('label_revisions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('junk_regions', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('links', sa.JSON(), nullable=True))
    with op.batch_alter_table('gold_labels', schema=None) as batch_op:
        batch_op.add_column(sa.Column('link_votes', sa.JSON(), nullable=True))
    op.create_table(
        'links',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('caption_id', sa.Integer(), nullable=False),
        sa.Column('token_index', sa.Integer(), nullable=False),
        sa.Column('region_index', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['assignment_id'], ['assignments.id'], name=op.f('fk_links_assignment_id_assignments'),
                                ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['caption_id'], ['captions.id'], name=op.f('fk_links_caption_id_captions'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_links')),
        sa.UniqueConstraint('assignment_id', 'token_index', 'region_index',
                            name=op.f('uq_links_assignment_id_token_index_region_index')),
    )
    op.create_index('ix_links_caption', 'links', ['caption_id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_links_caption', table_name='links')
    op.drop_table('links')
    with op.batch_alter_table('gold_labels', schema=None) as batch_op:
        batch_op.drop_column('link_votes')
    with op.batch_alter_table('label_revisions', schema=None) as batch_op:
        batch_op.drop_column('links')
        batch_op.drop_column('junk_regions')
    with op.batch_alter_table('regions', schema=None) as batch_op:
        batch_op.drop_column('prompts')
        batch_op.drop_column('created_at')
        batch_op.drop_column('added_by')
