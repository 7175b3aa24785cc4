"""Imported by the simulation workers' fork server, and by nothing else: its import ties the
server to the process that started it (:func:`fcctl.common.lifeline.die_with_parent`).

multiprocessing offers a fork server one hook, the modules it imports when it starts
(``set_forkserver_preload``; see ``fcctl.analyzers.replay.parallel.SERVER_PRELOAD``), so the
call is made at import. The server also ends by itself once its owner's end of the pipe it
watches closes; the signal makes that certain, and its workers, which the kernel signals when
the server ends (they call :func:`~fcctl.common.lifeline.exit_with_parent`), follow.
"""

from __future__ import annotations

from fcctl.common.lifeline import die_with_parent

SERVER_TIED = die_with_parent()
