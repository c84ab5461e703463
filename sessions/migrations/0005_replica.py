from django.db import migrations, models


class Migration(migrations.Migration):
    """The cluster's durable copies of each session's events and meta.json (sessions/store/replica.py)."""

    dependencies = [
        ('compozy_sessions', '0004_session_folder_node'),
    ]

    operations = [
        migrations.CreateModel(
            name='EventCopy',
            fields=[
                ('pk', models.CompositePrimaryKey('session_id', 'sequence', blank=True, editable=False,
                                                  primary_key=True, serialize=False)),
                ('session_id', models.CharField(max_length=64)),
                ('sequence', models.BigIntegerField()),
                ('event_id', models.CharField(max_length=64)),
                ('turn_id', models.CharField(max_length=64)),
                ('type', models.CharField(max_length=64)),
                ('agent_name', models.CharField(max_length=200)),
                ('content', models.TextField()),
                ('timestamp', models.CharField(max_length=40)),
                ('archived', models.BooleanField(default=False)),
            ],
            options={'db_table': 'compozy_event_copy'},
        ),
        migrations.CreateModel(
            name='MetaCopy',
            fields=[
                ('session_id', models.CharField(max_length=64, primary_key=True, serialize=False)),
                ('version', models.BigIntegerField(default=1)),
                ('meta', models.TextField()),
            ],
            options={'db_table': 'compozy_meta_copy'},
        ),
    ]
