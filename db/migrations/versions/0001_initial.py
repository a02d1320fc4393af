"""initial schema

Revision ID: 0001
Revises: 
Create Date: first release
"""
from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('datasets',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_datasets')),
    sa.UniqueConstraint('name', name=op.f('uq_datasets_name'))
    )
    op.create_table('images',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('width', sa.Integer(), nullable=False),
    sa.Column('height', sa.Integer(), nullable=False),
    sa.Column('n_bytes', sa.Integer(), nullable=False),
    sa.Column('regions_source', sa.String(length=40), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_images')),
    sa.UniqueConstraint('sha256', name=op.f('uq_images_sha256'))
    )
    op.create_table('users',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('role', sa.String(length=20), nullable=False),
    sa.Column('password_hash', sa.String(length=300), nullable=False),
    sa.Column('active', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('name', name=op.f('uq_users_name'))
    )
    op.create_table('captions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('external_id', sa.String(length=200), nullable=False),
    sa.Column('image_id', sa.Integer(), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('model', sa.String(length=200), nullable=True),
    sa.Column('references', sa.JSON(), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('annotators_needed', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['dataset_id'], ['datasets.id'], name=op.f('fk_captions_dataset_id_datasets'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['image_id'], ['images.id'], name=op.f('fk_captions_image_id_images')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_captions')),
    sa.UniqueConstraint('dataset_id', 'external_id', name=op.f('uq_captions_dataset_id_external_id'))
    )
    with op.batch_alter_table('captions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_captions_dataset_id'), ['dataset_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_captions_image_id'), ['image_id'], unique=False)

    op.create_table('regions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('image_id', sa.Integer(), nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('source', sa.String(length=40), nullable=False),
    sa.Column('x0', sa.Float(), nullable=False),
    sa.Column('y0', sa.Float(), nullable=False),
    sa.Column('x1', sa.Float(), nullable=False),
    sa.Column('y1', sa.Float(), nullable=False),
    sa.Column('mask_rle', sa.JSON(), nullable=True),
    sa.Column('confidence', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['image_id'], ['images.id'], name=op.f('fk_regions_image_id_images'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_regions')),
    sa.UniqueConstraint('image_id', 'index', name=op.f('uq_regions_image_id_index'))
    )
    op.create_table('assignments',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('caption_id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('lease_expires_at', sa.DateTime(), nullable=False),
    sa.Column('revision', sa.Integer(), nullable=False),
    sa.Column('time_spent_ms', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.Column('submitted_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['caption_id'], ['captions.id'], name=op.f('fk_assignments_caption_id_captions'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_assignments_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_assignments')),
    sa.UniqueConstraint('caption_id', 'user_id', name=op.f('uq_assignments_caption_id_user_id'))
    )
    with op.batch_alter_table('assignments', schema=None) as batch_op:
        batch_op.create_index('ix_assignments_caption_status', ['caption_id', 'status'], unique=False)
        batch_op.create_index('ix_assignments_user_status', ['user_id', 'status'], unique=False)

    op.create_table('flags',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('caption_id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=30), nullable=False),
    sa.Column('comment', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['caption_id'], ['captions.id'], name=op.f('fk_flags_caption_id_captions'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_flags_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_flags'))
    )
    with op.batch_alter_table('flags', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_flags_caption_id'), ['caption_id'], unique=False)

    op.create_table('gold_labels',
    sa.Column('caption_id', sa.Integer(), nullable=False),
    sa.Column('token_labels', sa.JSON(), nullable=False),
    sa.Column('region_labels', sa.JSON(), nullable=False),
    sa.Column('token_votes', sa.JSON(), nullable=True),
    sa.Column('region_votes', sa.JSON(), nullable=True),
    sa.Column('source', sa.String(length=20), nullable=False),
    sa.Column('adjudicator_id', sa.Integer(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['adjudicator_id'], ['users.id'], name=op.f('fk_gold_labels_adjudicator_id_users'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['caption_id'], ['captions.id'], name=op.f('fk_gold_labels_caption_id_captions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('caption_id', name=op.f('pk_gold_labels'))
    )
    op.create_table('predictions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('caption_id', sa.Integer(), nullable=False),
    sa.Column('metric', sa.String(length=50), nullable=False),
    sa.Column('model_version', sa.String(length=200), nullable=False),
    sa.Column('scores', sa.JSON(), nullable=False),
    sa.Column('token_scores', sa.JSON(), nullable=False),
    sa.Column('region_scores', sa.JSON(), nullable=False),
    sa.Column('uncertainty', sa.Float(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['caption_id'], ['captions.id'], name=op.f('fk_predictions_caption_id_captions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_predictions')),
    sa.UniqueConstraint('caption_id', 'metric', 'model_version', name=op.f('uq_predictions_caption_id_metric_model_version'))
    )
    op.create_table('tokens',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('caption_id', sa.Integer(), nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('start', sa.Integer(), nullable=False),
    sa.Column('end', sa.Integer(), nullable=False),
    sa.Column('semantic', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['caption_id'], ['captions.id'], name=op.f('fk_tokens_caption_id_captions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_tokens')),
    sa.UniqueConstraint('caption_id', 'index', name=op.f('uq_tokens_caption_id_index'))
    )
    op.create_table('label_revisions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('assignment_id', sa.Integer(), nullable=False),
    sa.Column('revision', sa.Integer(), nullable=False),
    sa.Column('action', sa.String(length=20), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('incorrect_tokens', sa.JSON(), nullable=False),
    sa.Column('mentioned_regions', sa.JSON(), nullable=False),
    sa.Column('undo_to', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['assignment_id'], ['assignments.id'], name=op.f('fk_label_revisions_assignment_id_assignments'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_label_revisions')),
    sa.UniqueConstraint('assignment_id', 'revision', name=op.f('uq_label_revisions_assignment_id_revision'))
    )
    op.create_table('labels',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('assignment_id', sa.Integer(), nullable=False),
    sa.Column('caption_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=10), nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['assignment_id'], ['assignments.id'], name=op.f('fk_labels_assignment_id_assignments'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['caption_id'], ['captions.id'], name=op.f('fk_labels_caption_id_captions'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_labels')),
    sa.UniqueConstraint('assignment_id', 'kind', 'index', name=op.f('uq_labels_assignment_id_kind_index'))
    )
    with op.batch_alter_table('labels', schema=None) as batch_op:
        batch_op.create_index('ix_labels_caption_kind_index', ['caption_id', 'kind', 'index'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('labels', schema=None) as batch_op:
        batch_op.drop_index('ix_labels_caption_kind_index')

    op.drop_table('labels')
    op.drop_table('label_revisions')
    op.drop_table('tokens')
    op.drop_table('predictions')
    op.drop_table('gold_labels')
    with op.batch_alter_table('flags', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_flags_caption_id'))

    op.drop_table('flags')
    with op.batch_alter_table('assignments', schema=None) as batch_op:
        batch_op.drop_index('ix_assignments_user_status')
        batch_op.drop_index('ix_assignments_caption_status')

    op.drop_table('assignments')
    op.drop_table('regions')
    with op.batch_alter_table('captions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_captions_image_id'))
        batch_op.drop_index(batch_op.f('ix_captions_dataset_id'))

    op.drop_table('captions')
    op.drop_table('users')
    op.drop_table('images')
    op.drop_table('datasets')
