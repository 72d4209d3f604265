"""The bundled published report (written only by ``popcorn bench publish``)."""
