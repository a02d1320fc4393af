"""label quality: control items and their rate, consensus confidence, a review stage

Revision ID: 0008
Revises: 0007
Create Date: eighth release
"""
from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # reviewer and actor are user names, as regions' added_by: a foreign key would make SQLite
    # rebuild the table, and dropping the old one would cascade into its labels
    # nothing stored changes meaning: no item is a control, no dataset reviews, existing gold has
    # no measured confidence (NULL), and every existing revision was the annotator's own step
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.add_column(sa.Column('control_rate', sa.Float(), nullable=False, server_default='0.1'))
        batch_op.add_column(sa.Column('show_control_answers', sa.Boolean(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('min_control_accuracy', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('review', sa.Boolean(), nullable=False, server_default='0'))
    with op.batch_alter_table('captions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('control', sa.Boolean(), nullable=False, server_default='0'))
    with op.batch_alter_table('assignments', schema=None) as batch_op:
        batch_op.add_column(sa.Column('review_status', sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column('review_comment', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('reviewer', sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column('reviewed_at', sa.DateTime(), nullable=True))
    with op.batch_alter_table('label_revisions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('actor', sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column('comment', sa.Text(), nullable=True))
    for table in ('gold_labels', 'gold_revisions'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('token_confidence', sa.JSON(), nullable=True))
            batch_op.add_column(sa.Column('region_confidence', sa.JSON(), nullable=True))


def downgrade() -> None:
    # plain DROP COLUMN (SQLite 3.35 and later): a batch rebuild would drop the old assignments
    # table, and with it, by cascade, every label, tie and revision of every judgement
    for table, columns in (('gold_revisions', ('region_confidence', 'token_confidence')),
                           ('gold_labels', ('region_confidence', 'token_confidence')),
                           ('label_revisions', ('comment', 'actor')),
                           ('assignments', ('reviewed_at', 'reviewer', 'review_comment', 'review_status')),
                           ('captions', ('control',)),
                           ('datasets', ('review', 'min_control_accuracy', 'show_control_answers', 'control_rate'))):
        for column in columns:
            op.execute(f'ALTER TABLE {table} DROP COLUMN {column}')
