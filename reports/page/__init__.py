"""The modules of the ``fcctl report`` page (:mod:`fcctl.reports.html_report` names them all).

:mod:`~fcctl.reports.page.shell` builds and writes the page; :mod:`~fcctl.reports.page.elements`
holds the small HTML builders; one module per section: ``decision``, ``trace``, ``reuse``,
``storage``, ``replay``, ``recommendation``, ``provenance``.
"""
