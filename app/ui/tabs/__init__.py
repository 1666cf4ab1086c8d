"""The UI's tabs, one module each (chat, compare, pair settings, models, benchmark): ``build(state)`` lays the
tab out and wires its events; the work is the service's."""
