"""queue order: a dataset's annotation queue order and seed, a caption's place in it

Revision ID: 0003
Revises: 0002
Create Date: third release
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # existing datasets keep today's queue: caption id order
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.add_column(sa.Column('queue_order', sa.String(length=20), server_default='sequential', nullable=False))
        batch_op.add_column(sa.Column('queue_seed', sa.Integer(), server_default='0', nullable=False))

    with op.batch_alter_table('captions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('queue_rank', sa.Float(), nullable=True))
        batch_op.create_index(batch_op.f('ix_captions_queue_rank'), ['queue_rank'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('captions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_captions_queue_rank'))
        batch_op.drop_column('queue_rank')

    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.drop_column('queue_seed')
        batch_op.drop_column('queue_order')
