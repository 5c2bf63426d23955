"""The broker: routes requests by palace to worker processes and supervises them."""
