"""The tables of the app formerly labelled `work` take the `tasks` app's names (work_task → tasks_task, …)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('tasks', '0001_initial'),
    ]

    operations = [
        migrations.AlterModelTable(name='task', table=None),
        migrations.AlterModelTable(name='taskrun', table=None),
        migrations.AlterModelTable(name='taskevent', table=None),
    ]
