"""the audit log, and a session version per user

Revision ID: 0007
Revises: 0006
Create Date: seventh release
"""
from alembic import op
import sqlalchemy as sa


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # every existing user starts at session version 0: sessions issued before stay valid until a change
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('session_version', sa.Integer(), nullable=False, server_default='0'))
    op.create_table(
        'audit_events',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('at', sa.DateTime(), nullable=False),
        sa.Column('actor', sa.String(length=200), nullable=True),
        sa.Column('action', sa.String(length=40), nullable=False),
        sa.Column('address', sa.String(length=100), nullable=True),
        sa.Column('target', sa.String(length=300), nullable=True),
        sa.Column('details', sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_events')),
    )
    op.create_index('ix_audit_events_at', 'audit_events', ['at'], unique=False)
    op.create_index('ix_audit_events_action_at', 'audit_events', ['action', 'at'], unique=False)
    op.create_index('ix_audit_events_actor_at', 'audit_events', ['actor', 'at'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_audit_events_actor_at', table_name='audit_events')
    op.drop_index('ix_audit_events_action_at', table_name='audit_events')
    op.drop_index('ix_audit_events_at', table_name='audit_events')
    op.drop_table('audit_events')
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.drop_column('session_version')
