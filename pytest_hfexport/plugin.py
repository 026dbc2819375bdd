"""Plugin entry point (filled in by issue 5). Loading it must stay cheap: no torch import here."""
