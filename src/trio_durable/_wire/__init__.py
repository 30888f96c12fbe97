"""What travels through a broker: tasks, results, decisions, and the layers around them."""
