"""flashml.pipelines."""
