"""model versions: fine-tuned checkpoints the server can score with, one of them active

Revision ID: 0004
Revises: 0003
Create Date: fourth release
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # no row active: the server keeps its default model
    op.create_table(
        'model_versions',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=200), nullable=False),
        sa.Column('path', sa.Text(), nullable=False),
        sa.Column('sha256', sa.String(length=64), nullable=False),
        sa.Column('parent_sha256', sa.String(length=64), nullable=True),
        sa.Column('parent_id', sa.Integer(), nullable=True),
        sa.Column('dataset', sa.String(length=200), nullable=True),
        sa.Column('labels', sa.JSON(), nullable=False),
        sa.Column('figures', sa.JSON(), nullable=False),
        sa.Column('status', sa.String(length=20), nullable=False),
        sa.Column('active', sa.Boolean(), server_default='0', nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(['parent_id'], ['model_versions.id'],
                                name=op.f('fk_model_versions_parent_id_model_versions'), ondelete='SET NULL'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_model_versions')),
    )
    with op.batch_alter_table('model_versions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_model_versions_sha256'), ['sha256'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('model_versions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_model_versions_sha256'))

    op.drop_table('model_versions')
